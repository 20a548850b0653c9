"""Model programs with text Python warns about are read without a warning on the console."""

import warnings

from orchestry.envs.code.extract import extract_code
from orchestry.envs.code.reward import code_facts

# parses, but `ast.parse` warns: invalid escape sequences and `is` with a literal
NOISY_AUX = 'def aux(s):\n    return s.split("\\d") if s is "" else s.strip("\\w")\n'
NOISY_MAIN = 'def main(s):\n    return aux(s) + ["\\q"]\n'


def test_reading_a_noisy_program_warns_nothing():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = f"```python\n{NOISY_AUX}```"
        aux = extract_code(text)
        facts = code_facts([aux], ["aux"], NOISY_MAIN, "main")
    assert "aux" in aux and facts.main_defined and facts.helpers[0].defined
    assert [str(w.message) for w in caught] == []


def test_the_same_text_warns_when_parsed_plainly():
    """The check above can fail: the plain parse of these programs does warn."""
    import ast

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ast.parse(NOISY_AUX)
    assert any(issubclass(w.category, SyntaxWarning | DeprecationWarning) for w in caught)
