"""app.py's command line: where it listens."""

import pytest

import app as app_cli


def test_localhost_7860_when_nothing_is_set():
    assert app_cli.listen_address(None, None, environ={}) == ("127.0.0.1", 7860)


def test_gradio_variables_are_honoured_as_gradio_and_spaces_set_them():
    env = {"GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": "7861"}
    assert app_cli.listen_address(None, None, environ=env) == ("0.0.0.0", 7861)


def test_flags_win_over_the_variables():
    env = {"GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": "7861"}
    assert app_cli.listen_address("127.0.0.1", 8000, environ=env) == ("127.0.0.1", 8000)


def test_a_bad_port_variable_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        app_cli.listen_address(None, None, environ={"GRADIO_SERVER_PORT": "http"})
    assert "GRADIO_SERVER_PORT" in capsys.readouterr().err
