"""The prompt of a live re-decode (whisper_demo/live/prompt.py), on tables."""

from whisper_demo.live.policy import TimedWord
from whisper_demo.live.prompt import prompt_from


def timed(text: str):
    return [TimedWord(word, 0.5 * i, 0.5 * i + 0.4) for i, word in enumerate(text.split())]


def test_the_prompt_is_the_end_of_the_committed_text():
    words = timed("And so, my fellow Americans, ask not what your country can do for you.")
    assert prompt_from(words, 200) == "And so, my fellow Americans, ask not what your country can do for you."
    assert prompt_from(words, 20) == "ntry can do for you."  # the last 20 characters
    assert prompt_from([], 200) is None


def test_a_sentence_said_again_is_kept_only_where_it_was_said_last():
    # compared as normalised words: case and punctuation do not make another sentence
    words = timed("Montreal, forced a liner. I hardly know her. montreal forced, a liner! Montreal forced a liner.")
    assert prompt_from(words, 200) == "I hardly know her. Montreal forced a liner."
    # the room left is filled from earlier text, still each sentence once
    words = timed("The birch canoe slid. Montreal forced a liner. It is hot. Montreal forced a liner.")
    assert prompt_from(words, 200) == "The birch canoe slid. It is hot. Montreal forced a liner."


def test_an_unfinished_sentence_and_different_sentences_are_kept():
    words = timed("We shall fight. We shall fight on the beaches. We shall")
    assert prompt_from(words, 200) == "We shall fight. We shall fight on the beaches. We shall"
