"""Template environment and quoting filters."""

import jinja2
import pytest

from kit.deploy.templating import UnsafeValue, dockerfile_str, environment, exec_form, glob_word


def test_strict_undefined_fails_on_a_misspelled_variable():
    with pytest.raises(jinja2.UndefinedError):
        environment().from_string("{{ c.nope }}").render(c={})


def test_dockerfile_str_escapes_dollars_and_quotes():
    assert dockerfile_str('a"b$c') == '"a\\"b\\$c"'


@pytest.mark.parametrize("bad", ["line1\nline2", "tab\there", "nul\x00", "esc\x1b["])
def test_filters_refuse_control_characters_without_echoing(bad):
    for fn in (dockerfile_str, lambda v: exec_form([v])):
        with pytest.raises(UnsafeValue) as info:
            fn(bad)
        assert bad not in str(info.value)


def test_exec_form_is_a_json_list():
    assert exec_form(["python", "-m", "x y"]) == '["python", "-m", "x y"]'



def test_compiled_templates_come_back_from_the_cache_unchanged(tmp_path, monkeypatch):
    # The bytecode cache only saves compiling: a render from stored code is byte for byte a fresh render.
    import kit.deploy.templating
    from kit.deploy.pipeline import prepare

    assert environment().bytecode_cache is not None  # the kit's own environment keeps compiled templates
    monkeypatch.setattr(kit.deploy.templating, "_bytecode_cache", lambda: jinja2.FileSystemBytecodeCache(str(tmp_path)))
    try:
        environment.cache_clear()
        first = prepare("cpu").files  # compiles, stores
        stored = sorted(p.name for p in tmp_path.iterdir())
        environment.cache_clear()
        assert stored and prepare("cpu").files == first  # loads the stored code
        assert sorted(p.name for p in tmp_path.iterdir()) == stored
    finally:
        environment.cache_clear()


def test_glob_word_takes_the_kits_own_absolute_globs_and_nothing_shell_could_read_otherwise():
    assert glob_word("/usr/lib/gcc/*/*/lto1") == "/usr/lib/gcc/*/*/lto1"
    for bad in ("usr/lib/*.a", "/usr/lib/*.a; rm -rf /", "/a b", "/a$(x)", "/a\nb", "/a`x`"):
        with pytest.raises(UnsafeValue):
            glob_word(bad)
