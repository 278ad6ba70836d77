"""The bounded YAML loader (``yaml_safe`` over ``yaml_compose``): each limit at its boundary, the
one-line messages, JSON types only.

Every test runs over both parsers the loader can sit on: libyaml's (the default) and PyYAML's own
(used where PyYAML was built without libyaml).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hwsim.config import yaml_compose, yaml_safe
from hwsim.config.yaml_compose import MAX_DEPTH, MAX_INT_DIGITS, MAX_NODES, make_loader_class
from hwsim.config.yaml_safe import MAX_FILE_BYTES, load_yaml, read_yaml_file
from hwsim.errors import ConfigError, HwsimError


@pytest.fixture(autouse=True, params=["libyaml", "pyyaml"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "libyaml" and yaml_compose.CParser is None:
        pytest.skip("PyYAML built without libyaml")
    monkeypatch.setattr(yaml_safe, "_LOADER", make_loader_class(request.param == "libyaml"))
    return request.param


def _load(text: str) -> object:
    return load_yaml(text, "f.yaml", ConfigError)


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        _load(text)
    message = str(info.value)
    assert "\n" not in message
    return message


def _nested(levels: int) -> str:
    """A list nested ``levels`` deep, in block style: ``- - - 1``."""
    return "- " * levels + "1\n"


# ---- what comes out -----------------------------------------------------------------------------


def test_json_types_come_out_as_python_ones() -> None:
    text = (
        "s: x\ni: -12\nh: 0x1f\nf: 2.5\nb: true\nn: ~\nl: [1, 'two']\nm: {k: v}\nq: '2024-01-01'\n"
    )
    assert _load(text) == {
        "s": "x",
        "i": -12,
        "h": 31,
        "f": 2.5,
        "b": True,
        "n": None,
        "l": [1, "two"],
        "m": {"k": "v"},
        "q": "2024-01-01",
    }


def test_key_order_is_kept() -> None:
    assert list(_load("z: 1\na: 2\nm: 3\n")) == ["z", "a", "m"]  # type: ignore[arg-type]


def test_an_empty_document_is_none() -> None:
    assert _load("") is None
    assert _load("# only a comment\n") is None


def test_each_alias_is_its_own_copy() -> None:
    data = _load("a: &x {rows: 1, dims: [1, 2]}\nb: *x\n")
    assert data == {"a": {"rows": 1, "dims": [1, 2]}, "b": {"rows": 1, "dims": [1, 2]}}
    data["a"]["dims"].append(3)  # type: ignore[index]
    assert data["b"] == {"rows": 1, "dims": [1, 2]}  # type: ignore[index]


def test_merge_keys_give_defaults_that_explicit_keys_override() -> None:
    text = "base: &b {x: 1, y: 2}\nmore: &m {y: 5, z: 6}\nd:\n  <<: [*b, *m]\n  x: 3\n"
    assert _load(text)["d"] == {"x": 3, "y": 2, "z": 6}  # type: ignore[index]


# ---- limits, each at its boundary ---------------------------------------------------------------


def test_nesting_to_the_limit_loads_and_one_more_level_is_refused() -> None:
    assert _load(_nested(MAX_DEPTH - 1)) is not None  # the list levels plus the scalar inside
    message = _error(_nested(MAX_DEPTH))
    assert message.startswith(f"f.yaml:1: nesting deeper than {MAX_DEPTH} levels at [0][0]")
    assert message.endswith("(flatten the structure)")


def test_nesting_through_aliases_counts_the_aliased_depth() -> None:
    chain = "a1: &a1 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(2, 40))
    message = _error(chain)
    # a{i} is a mapping value (depth 2) holding i nested lists and the scalar: i + 2 levels
    bad = MAX_DEPTH - 1
    assert message.startswith(
        f"f.yaml:{bad}: nesting deeper than {MAX_DEPTH} levels through alias *a{bad - 1} "
        f"at a{bad}[0]"
    )


def _fan_out(levels: int, width: int) -> str:
    """``levels`` anchors, each a list of ``width`` aliases of the one before."""
    lines = ["l0: &l0 x"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_alias_expansion_is_counted_before_anything_is_built() -> None:
    # l_i is a list of 10 aliases of l_(i-1): it expands to 1 + 10 * size(l_(i-1)) nodes, so
    # l0..l5 are 1, 11, 111, ..., 111111. With the root and one key per entry the document holds
    # 12,353 nodes once l5's list opens; at 11,111 nodes each, its eighth alias of l4 takes it
    # past MAX_NODES.
    assert MAX_NODES == 100_000
    assert _error(_fan_out(9, 10)) == (
        "f.yaml:6: alias *l4 expands past 100000 values at l5[7] "
        "(use fewer aliases or write the values out)"
    )
    assert _load(_fan_out(4, 10))["l4"][9][9][9] == ["x"] * 10  # type: ignore[index]


def test_the_node_limit_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yaml_compose, "MAX_NODES", 1000)
    # a root mapping (1) + key (1) + list (1) + n scalars
    assert len(_load("k: [" + "0," * 997 + "]\n")["k"]) == 997  # type: ignore[index]
    message = _error("k: [" + "0," * 998 + "]\n")
    assert message == "f.yaml:1: the document grows past 1000 values at k[997] (split it)"


def test_a_recursive_alias_is_an_error() -> None:
    message = _error("chip:\n  inner: &a\n    name: *a\n")
    assert message == (
        "f.yaml:3: recursive alias *a at chip.inner.name "
        "(it is inside the node &a names; an alias must name a complete node)"
    )


def test_integer_digits_at_the_limit_load_and_one_more_is_refused() -> None:
    assert _load("n: " + "9" * MAX_INT_DIGITS) == {"n": int("9" * MAX_INT_DIGITS)}
    message = _error("a:\n  n: " + "9" * (MAX_INT_DIGITS + 1))
    assert message == f"f.yaml:2: an integer of 21 digits at a.n (at most {MAX_INT_DIGITS} digits)"
    assert _error("n: 0x" + "f" * 5000).startswith("f.yaml:1: an integer of 5000 digits at n")


@pytest.mark.parametrize("text", [".inf", "-.inf", ".nan", ".NaN", "1.0e+999"])
def test_floats_must_be_finite(text: str) -> None:
    assert _error(f"x: [{text}]") == (
        f"f.yaml:1: {text!r} is not a finite number at x[0] (give a finite number)"
    )


def test_file_size_at_the_limit_loads_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    body = b"a: 1\n"
    path.write_bytes(body + b"#" * (MAX_FILE_BYTES - len(body) - 1) + b"\n")
    assert read_yaml_file(path, ConfigError) == {"a": 1}
    path.write_bytes(body + b"#" * (MAX_FILE_BYTES - len(body)) + b"\n")
    with pytest.raises(ConfigError, match=rf"^{path}: file is larger than 2 MiB \("):
        read_yaml_file(path, ConfigError)


# ---- what is refused, and the message -----------------------------------------------------------


def test_duplicate_keys_name_the_key_and_both_lines() -> None:
    message = _error("te:\n  rows: 1\n  cols: 2\n  'rows': 3\n")
    assert message == (
        "f.yaml:4: duplicate key 'rows' at te.rows (first at line 2; give each key once)"
    )


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ("2024-01-01", "2024-01-01 reads as a date or time"),
        ("2001-12-14t21:59:43.10-05:00", "2001-12-14t21:59:43.10-05:00 reads as a date or time"),
        ("!!binary aGk=", "binary data (!!binary)"),
        ("!!set {a, b}", "a set (!!set)"),
        ("!!omap [a: 1]", "an ordered map (!!omap)"),
        ("!!pairs [a: 1]", "a list of pairs (!!pairs)"),
        ("!!python/name:os.system", "a value tagged !!python/name:os.system"),
        ("!local 3", "a value tagged !local"),
    ],
)
def test_values_of_no_json_type_are_refused_at_their_path(value: str, what: str) -> None:
    message = _error(f"chip:\n  list:\n  - 1\n  - {value}\n")
    assert message.startswith(f"f.yaml:4: {what} at chip.list[1] (")


def test_a_date_message_says_how_to_give_a_string() -> None:
    assert _error("name: 2024-01-01").endswith(
        '(dates are not values here; to give a string, quote it: "2024-01-01")'
    )


def test_python_tags_are_never_constructed() -> None:
    message = _error("x: !!python/object/apply:os.system [echo pwned]")
    assert "a data file never makes Python objects" in message


@pytest.mark.parametrize(
    ("key", "kind"),
    [("1", "an integer"), ("2.5", "a number"), ("on", "a boolean"), ("~", "null")],
)
def test_keys_must_be_strings(key: str, kind: str) -> None:
    message = _error(f"table:\n  {key}: x\n")
    assert (
        message
        == f'f.yaml:2: key {key!r} reads as {kind} at table (keys are strings; quote it: "{key}")'
    )
    assert _load(f"table:\n  '{key}': x\n") == {"table": {key: "x"}}


def test_a_list_as_a_key_is_refused() -> None:
    assert (
        _error("? [a, b]\n: 1\n") == "f.yaml:1: a list as a key at the top level (keys are strings)"
    )


def test_anchors_must_be_defined_once_and_before_use() -> None:
    assert _error("a: *x\n") == "f.yaml:1: alias *x names no anchor at a (define &x before it)"
    assert (
        _error("a: &x 1\nb: &x 2\n") == "f.yaml:2: anchor &x defined again at b (first at line 1)"
    )


def test_syntax_errors_name_line_and_column() -> None:
    assert _error("a: 1\nb: [1, 2\n").startswith("f.yaml:3: not valid YAML at column 1 (")
    assert _error("a: 1\n---\nb: 2\n") == (
        "f.yaml:2: not valid YAML at column 1 (expected a single document in the stream, "
        "but found another document)"
    )


def test_a_value_inside_a_larger_document_names_its_full_path() -> None:
    with pytest.raises(ConfigError) as info:
        load_yaml(
            "{a: 1, a: 2}",
            "--set 'x.y={a: 1, a: 2}'",
            ConfigError,
            path=("x", "y"),
            show_lines=False,
        )
    assert str(info.value) == (
        "--set 'x.y={a: 1, a: 2}': duplicate key 'a' at x.y.a (first at line 1; give each key once)"
    )


def test_errors_are_the_callers_class() -> None:
    class MyError(HwsimError):
        pass

    with pytest.raises(MyError, match="duplicate key"):
        load_yaml("a: 1\na: 2\n", "s.yaml", MyError)


def test_non_utf8_names_line_and_byte_offset(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"chip:\n  name: caf\xe9\n")
    with pytest.raises(ConfigError) as info:
        read_yaml_file(path, ConfigError)
    assert (
        str(info.value)
        == f"{path}:2: not UTF-8 text: byte 0xe9 at offset 17 (save the file as UTF-8)"
    )


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert read_yaml_file(path, ConfigError) == {"a": 1}


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"^.*: cannot read config \(it is a folder, not a regular file\)$"
    ):
        read_yaml_file(tmp_path, ConfigError, "config")
