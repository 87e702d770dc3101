"""What a safe value is: the one set of rules that preset validation and every renderer share.

Validation (kit/config/preset.py) and render (kit/deploy/templating.py, kit/deploy/composefile.py) call these same functions, so
`kit validate` refuses exactly what `kit render` would refuse. Messages never echo the value: it may be a secret.
This module imports nothing heavy (the CLI's validate path loads it).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # packaging's requirement grammar costs a render about 20 ms to import: loaded on first use
    from packaging.requirements import Requirement


class UnsafeValue(ValueError):
    """A value cannot be written safely into the target format."""


# Everything a line-oriented reader may take as the end of a line: the C0 controls (\n, \r, \v, \f...), DEL,
# the C1 controls (NEL U+0085 among them), and Unicode's line and paragraph separators. YAML ends a comment at
# \n, \r, U+0085, U+2028 and U+2029 (YAML 1.1 "b-char"); Python's str.splitlines() also breaks at \v, \f,
# \x1c-\x1e; a terminal acts on the rest. Tabs are controls too: refused, never needed in a value. Lone
# surrogates (U+D800-U+DFFF, which a YAML file or an override can carry as escapes) cannot be written as UTF-8.
_LINE_BREAK_OR_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def has_control(text: str) -> bool:
    return _LINE_BREAK_OR_CONTROL.search(text) is not None


def check_text(value: object, what: str = "the value") -> str:
    """Any string the kit writes: no line break of any kind and no control character."""
    text = str(value)
    if has_control(text):
        raise UnsafeValue(f"{what} contains a line break or control character (value not shown)")
    return text


def check_argument(value: object, what: str = "the value") -> str:
    """A value that becomes one argv item after an option: a leading `-` would be read as another option.

    Negative numbers stay allowed: argparse takes `-1` as a value when the parser has no numeric options.
    """
    text = check_text(value, what)
    if text.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?([eE][-+]?\d+)?", text):
        raise UnsafeValue(f"{what} starts with '-', which the server would read as an option")
    return text


# Docker's image reference grammar, as github.com/distribution/reference v0.6.0 spells it (regexp.go):
#   reference := name [ ":" tag ] [ "@" digest ];  name := [domain "/"] remote-name
#   domain := host [":" port]; host := domain-name | "[" IPv6 "]"; domain-name := component ("." component)*
#   component := [a-zA-Z0-9] | [a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]
#   path-component := [a-z0-9]+ (separator [a-z0-9]+)*; separator := [_.] | "__" | "-"+
#   tag := [\w][\w.-]{0,127}; digest := algorithm ":" hex (sha256: 64 lowercase hex)
# The name's total length is capped at 255 (reference.go RepositoryNameTotalLengthMax). \w is ASCII in Go.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_REMOTE = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_NAME = rf"(?:{_DOMAIN}/)?{_REMOTE}"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE_RE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?", re.ASCII)
REPOSITORY_RE = re.compile(_NAME, re.ASCII)
NAME_TOTAL_LENGTH_MAX = 255


def check_image_ref(ref: object, what: str = "the value") -> str:
    """An image reference Docker parses the same way: name[:tag][@digest], by distribution/reference's grammar."""
    text = check_text(ref, what)
    found = REFERENCE_RE.fullmatch(text)
    if found is None or len(found["name"]) > NAME_TOTAL_LENGTH_MAX:
        raise UnsafeValue(f"{what} is not a valid image reference (name[:tag][@sha256:digest], lowercase name)")
    return text


def check_repository(name: object, what: str = "the value") -> str:
    """A repository name without tag or digest (image.repository: the kit adds the tag)."""
    text = check_text(name, what)
    if REPOSITORY_RE.fullmatch(text) is None or len(text) > NAME_TOTAL_LENGTH_MAX:
        raise UnsafeValue(f"{what} is not a valid repository name (lowercase [domain/]path, no tag)")
    return text


def check_requirement(line: object, what: str = "the value") -> Requirement:
    """One PEP 508 requirement, pinned with ==, with no pip option, URL or environment marker.

    requirements.txt is read by pip line by line: an option (`--index-url`, `-e`, `-r`) would change where
    packages come from, so only a plain `name[extras]==version` is taken.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    text = check_text(line, what)
    if text.lstrip().startswith("-"):
        raise UnsafeValue(f"{what} is a pip option; only name==version is allowed")
    try:
        req = Requirement(text)
    except InvalidRequirement:
        raise UnsafeValue(f"{what} is not a PEP 508 requirement; write name==version") from None
    pins = list(req.specifier)
    if req.url or req.marker or len(pins) != 1 or pins[0].operator != "==" or "*" in pins[0].version:
        raise UnsafeValue(f"{what} is not pinned; write name==version")
    return req


def compose_escape(text: str) -> str:
    """Compose interpolates `$VAR` and `${VAR}` in every string; `$$` is a literal `$`."""
    return text.replace("$", "$$")


def k8s_escape(text: str) -> str:
    """Kubernetes expands `$(VAR)` in a container's command, args and env values and reads `$$` as one `$`
    (core/v1 Container.args; k8s.io/kubernetes third_party/forked/golang/expansion): every `$` is doubled."""
    return text.replace("$", "$$")


def compose_text(value: object) -> str:
    """A string from the preset, as compose must see it: one line, `$` literal."""
    return compose_escape(check_text(value, "a value for compose"))
