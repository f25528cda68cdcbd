"""text.py: the project's one normaliser and word error rate."""

from whisper_demo.text import word_edits, word_error_rate, words


def test_normalised_words():
    assert words("Ask not, what your country can do!") == ["ask", "not", "what", "your", "country", "can", "do"]


def test_word_edits_count_substitutions_insertions_and_deletions():
    assert word_edits("the cat sat", "the cat sat") == 0
    assert word_edits("the bat sat", "the cat sat") == 1
    assert word_edits("the cat sat down", "the cat sat") == 1
    assert word_edits("cat sat", "the cat sat") == 1
    assert word_edits("", "the cat sat") == 3 and word_edits("the cat", "") == 2


def test_word_error_rate_is_edits_over_reference_words():
    assert word_error_rate("The cat, sat.", "the cat sat") == 0.0
    assert word_error_rate("a cat sat on", "the cat sat") == 2 / 3
    assert word_error_rate("", "") == 0.0
