"""Template environment and quoting filters."""

import jinja2
import pytest
import yaml

from kit.templating import UnsafeValue, dockerfile_str, environment, exec_form, yaml_str


def test_strict_undefined_fails_on_a_misspelled_variable():
    with pytest.raises(jinja2.UndefinedError):
        environment().from_string("{{ c.nope }}").render(c={})


@pytest.mark.parametrize("value", ["plain", 'quo"te', "back\\slash", "$HOME and ${X}", "colon: yes", "#hash", "ünï"])
def test_yaml_str_round_trips(value):
    loaded = yaml.safe_load(f"k: {yaml_str(value)}")["k"]
    # $ is doubled for compose interpolation; compose turns $$ back into $.
    assert loaded.replace("$$", "$") == value


def test_dockerfile_str_escapes_dollars_and_quotes():
    assert dockerfile_str('a"b$c') == '"a\\"b\\$c"'


@pytest.mark.parametrize("bad", ["line1\nline2", "tab\there", "nul\x00", "esc\x1b["])
def test_filters_refuse_control_characters_without_echoing(bad):
    for fn in (yaml_str, dockerfile_str, lambda v: exec_form([v])):
        with pytest.raises(UnsafeValue) as info:
            fn(bad)
        assert bad not in str(info.value)


def test_exec_form_is_a_json_list():
    assert exec_form(["python", "-m", "x y"]) == '["python", "-m", "x y"]'
