"""Hardware configs: presets, the time base, error messages, overrides, the hash, peak numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pydantic
import pytest
import yaml

from hwsim.cli.config_cmd import SCHEMA_PATH, json_schema_text
from hwsim.config import (
    CONFIGS_DIR,
    PRESET_NAMES,
    TimeBase,
    config_hash,
    list_presets,
    load_config,
)
from hwsim.config.loader import read_config_dict, validate_config
from hwsim.errors import ConfigError
from hwsim.report import peaks

# ---- presets ----------------------------------------------------------------------------------


def test_list_presets_finds_all_four() -> None:
    assert list_presets() == sorted(PRESET_NAMES)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_preset_loads_and_satisfies_cross_field_invariants(name: str) -> None:
    config = load_config(name)
    te, sbuf, psum = config.tensor_engine, config.sbuf, config.psum
    assert config.chip.name == name
    assert te.rows <= sbuf.partitions
    assert te.cols <= psum.partitions
    assert te.stationary_free_max <= te.cols
    assert psum.bytes_per_partition % psum.banks == 0
    assert te.moving_free_max <= psum.bytes_per_partition // 4
    assert config.hbm.stacks * config.hbm.cores_per_stack >= config.chip.cores_per_chip
    assert "bf16" in te.cycles_multiplier_by_dtype


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_preset_points_editors_at_the_schema(name: str) -> None:
    first_line = (CONFIGS_DIR / f"{name}.yaml").read_text().splitlines()[0]
    assert first_line == "# yaml-language-server: $schema=hwsim-config.schema.json"


_NUMBER_LINE = re.compile(r"^(?P<indent> *)[\w]+: *(?P<value>-?[\d.]+) *(?:#(?P<comment>.*))?$")
_PROVENANCE = re.compile(r"§|\[S\d+|assumption|as trn2")


def _uncited_numbers(text: str) -> list[str]:
    """Lines setting a number with no §, [Sx] or 'assumption' on the line or its parent's line."""
    lines = text.splitlines()
    uncited = []
    for i, line in enumerate(lines):
        match = _NUMBER_LINE.match(line)
        if match is None:
            continue
        comments = [match["comment"] or ""]
        indent = len(match["indent"])
        for parent in reversed(lines[:i]):
            parent_indent = len(parent) - len(parent.lstrip(" "))
            if parent.strip() and not parent.lstrip().startswith("#") and parent_indent < indent:
                comments.append(parent.partition("#")[2])
                break
        if not any(_PROVENANCE.search(c) for c in comments):
            uncited.append(f"line {i + 1}: {line.strip()}")
    return uncited


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_preset_number_has_provenance(name: str) -> None:
    uncited = _uncited_numbers((CONFIGS_DIR / f"{name}.yaml").read_text())
    assert not uncited, f"{name}.yaml numbers without provenance:\n" + "\n".join(uncited)


def test_provenance_check_catches_a_bare_number() -> None:
    text = "dma:\n  engines: 16  # §2.5 [S12]\n  queues_per_engine: 16\nt:  # [S2]\n  bf16: 1\n"
    assert _uncited_numbers(text) == ["line 3: queues_per_engine: 16"]


# ---- time base --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_time_base_is_integral(name: str) -> None:
    config = load_config(name)
    base = TimeBase.from_config(config)
    clocks = {
        "tensor": config.tensor_engine.clock_mhz,
        "vector": config.vector_engine.clock_mhz,
        "scalar": config.scalar_engine.clock_mhz,
        "gpsimd": config.gpsimd_engine.clock_mhz,
    }
    for engine, mhz in clocks.items():
        assert base.base_mhz % mhz == 0, f"{engine} {mhz} MHz does not divide {base.base_mhz}"
        assert base.ticks_per_cycle[engine] * mhz == base.base_mhz


@pytest.mark.parametrize(
    ("name", "base_mhz", "ticks"),
    [
        # DESIGN.md example; Sync and the collective engine run on ScalarE's clock
        (
            "trn1",
            5600,
            {"tensor": 2, "vector": 5, "scalar": 4, "gpsimd": 4, "sync": 4, "collective": 4},
        ),
        (
            "trn2",
            4800,
            {"tensor": 2, "vector": 5, "scalar": 4, "gpsimd": 4, "sync": 4, "collective": 4},
        ),
        (
            "trn3",
            2400,
            {"tensor": 1, "vector": 2, "scalar": 2, "gpsimd": 2, "sync": 2, "collective": 2},
        ),
        (
            "tiny",
            1000,
            {"tensor": 1, "vector": 2, "scalar": 2, "gpsimd": 2, "sync": 2, "collective": 2},
        ),
    ],
)
def test_time_base_values(name: str, base_mhz: int, ticks: dict[str, int]) -> None:
    base = TimeBase.from_config(load_config(name))
    assert base.base_mhz == base_mhz
    assert base.ticks_per_cycle == ticks


def test_tiny_ticks_are_nanoseconds() -> None:
    base = TimeBase.from_config(load_config("tiny"))
    assert base.ns_to_ticks(100) == 100
    assert base.cycles_to_ticks("vector", 64) == 128


# ---- error messages ---------------------------------------------------------------------------


def _error(name: str = "trn2", overrides: object = ()) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(name, overrides)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message, "config errors are one line"
    return message


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param(
            {"tensor_engine.rowz": 64},
            ["tensor_engine.rowz: unknown key (did you mean 'rows'?)"],
            id="unknown-key-suggestion",
        ),
        pytest.param(
            {"tensor_enginez.rows": 64},
            ["tensor_enginez: unknown key (did you mean 'tensor_engine'?)"],
            id="unknown-section-suggestion",
        ),
        pytest.param(
            {"foo.bar": 1},
            ["foo: unknown key (valid keys: chip, collectives, dma, gpsimd_engine, hbm, host,"],
            id="unknown-section-list",
        ),
        pytest.param(
            {"tensor_engine.rows": "many"},
            ["tensor_engine.rows: input should be a valid integer, got 'many'"],
            id="wrong-type",
        ),
        pytest.param(
            {"sbuf.vector_gpsimd_share_access": "yes"},
            ["sbuf.vector_gpsimd_share_access: input should be a valid boolean, got 'yes'"],
            id="wrong-type-bool",
        ),
        pytest.param(
            {"tensor_engine.rows": 0},
            ["tensor_engine.rows:", "got 0", "(allowed: 1 <= value <= 1024)"],
            id="out-of-range-low",
        ),
        pytest.param(
            {"dma.hbm_write_bandwidth_fraction": 1.5},
            ["dma.hbm_write_bandwidth_fraction:", "got 1.5", "(allowed: 0.01 <= value <= 1)"],
            id="out-of-range-high",
        ),
        pytest.param(
            {"tensor_engine.cycles_multiplier_by_dtype.bf16": 100},
            ["tensor_engine.cycles_multiplier_by_dtype.bf16:", "(allowed: 1 <= value <= 64)"],
            id="out-of-range-per-dtype",
        ),
        pytest.param(
            {"tensor_engine.cycles_multiplier_by_dtype.fp64": 2},
            ["tensor_engine.cycles_multiplier_by_dtype: unknown key 'fp64' (allowed: 'fp32',"],
            id="unknown-per-dtype-key",
        ),
        pytest.param(
            {"chip.generation": "v9"},
            ["chip.generation: input should be 'v2', 'v3' or 'v4', got 'v9'"],
            id="bad-literal",
        ),
        pytest.param(
            {"tensor_engine.timing_model": "closed_fom"},
            ["tensor_engine.timing_model: unknown model 'closed_fom'", "(did you mean "],
            id="unknown-timing-model",
        ),
        pytest.param(
            {"tensor_engine.rows": 256},
            ["tensor_engine.rows (256) exceeds sbuf.partitions (128)"],
            id="cross-field",
        ),
        pytest.param(
            {"tensor_engine.moving_free_max": 8192},
            ["tensor_engine.moving_free_max (8192) exceeds the fp32 capacity of all PSUM banks"],
            id="cross-field-psum",
        ),
    ],
)
def test_bad_value_message(overrides: dict[str, object], expected: list[str]) -> None:
    message = _error("trn2", overrides)
    assert message.startswith("trn2: ")
    for part in expected:
        assert part in message
    assert "<top>" not in message
    assert "Literal" not in message


def test_unknown_timing_model_lists_valid_names() -> None:
    message = _error("trn2", {"tensor_engine.timing_model": "closed_fom"})
    assert "'closed_form'" in message
    assert "valid: " in message


def test_all_problems_reported_at_once() -> None:
    message = _error("trn2", {"tensor_engine.rows": 0, "dma.engines": 0})
    assert "tensor_engine.rows:" in message
    assert "dma.engines:" in message


def _write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_missing_key(tmp_path: Path) -> None:
    text = (CONFIGS_DIR / "trn2.yaml").read_text()
    path = _write(tmp_path, text.replace("  rows: 128", ""))
    assert _error(str(path)) == f"{path}: tensor_engine.rows: missing required key"


def test_missing_section() -> None:
    data = read_config_dict(CONFIGS_DIR / "trn2.yaml")
    del data["hbm"]
    with pytest.raises(ConfigError, match=r"^mine\.yaml: hbm: missing required key$"):
        validate_config(data, source="mine.yaml")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    assert _error(str(path)) == f"{path}: config file not found"


def test_unparsable_yaml_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "chip:\n  name: x\n  generation: [v2\n")
    message = _error(str(path))
    assert message.startswith(f"{path}:4: not valid YAML at column 1 (")


def test_tab_indented_yaml_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "chip:\n\tname: x\n")
    assert _error(str(path)).startswith(f"{path}:2: not valid YAML at column 1 (")


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "", "just a string\n"])
def test_non_mapping_yaml(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path, text)
    assert _error(str(path)) == f"{path}: a config must be a YAML mapping of sections"


def test_unknown_preset_name_suggests_closest() -> None:
    message = _error("trn4")
    assert message.startswith("trn4: not a preset (did you mean 'trn3'?)")
    assert "trn1, trn2, trn3, tiny" in message


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("tensor_engine.rows", "--set 'tensor_engine.rows': expected section.field=value"),
        ("=64", "--set '=64': expected section.field=value"),
        ("tensor_engine.rows=[1,", "--set 'tensor_engine.rows=[1,': value is not valid YAML"),
        ("tensor_engine.rows.x=1", "--set tensor_engine.rows.x: 'tensor_engine.rows' is a value"),
    ],
)
def test_bad_set_syntax(override: str, expected: str) -> None:
    assert expected in _error("trn2", [override])


# ---- overrides --------------------------------------------------------------------------------


def test_override_with_dict() -> None:
    config = load_config("trn2", {"tensor_engine.rows": 64, "dma.bandwidth_bytes_per_ns": 30.5})
    assert config.tensor_engine.rows == 64
    assert config.dma.bandwidth_bytes_per_ns == 30.5
    assert load_config("trn2").tensor_engine.rows == 128, "overrides never touch the preset"


def test_override_with_strings_is_yaml_typed() -> None:
    config = load_config(
        "trn2",
        [
            "tensor_engine.rows=64",
            "dma.bandwidth_bytes_per_ns=30.5",
            "sbuf.vector_gpsimd_share_access=true",
            "tensor_engine.timing_model=closed_form",
        ],
    )
    assert config.tensor_engine.rows == 64
    assert config.dma.bandwidth_bytes_per_ns == 30.5
    assert config.sbuf.vector_gpsimd_share_access is True


def test_later_override_wins() -> None:
    config = load_config("trn2", ["tensor_engine.rows=64", "tensor_engine.rows=32"])
    assert config.tensor_engine.rows == 32


def test_nested_override_into_per_dtype_table() -> None:
    config = load_config("trn2", ["tensor_engine.cycles_multiplier_by_dtype.fp32=2"])
    assert config.tensor_engine.cycles_multiplier_by_dtype == {
        "fp32": 2,
        "bf16": 1,
        "fp16": 1,
        "fp8_e4m3": 1,
        "fp8_e5m2": 1,
    }


def test_nested_dict_override_of_a_whole_table() -> None:
    packing = {"fp32": 1, "bf16": 1, "fp16": 1, "fp8_e4m3": 2, "fp8_e5m2": 2}
    config = load_config("trn1", {"tensor_engine.contraction_packing_by_dtype": packing})
    assert config.tensor_engine.contraction_packing_by_dtype == packing
    assert peaks.peak_flops_per_s(config, "fp8_e4m3") == 2 * peaks.peak_flops_per_s(config, "bf16")


def test_config_is_frozen() -> None:
    config = load_config("tiny")
    with pytest.raises(pydantic.ValidationError):
        config.tensor_engine.rows = 16  # type: ignore[misc]


# ---- hash -------------------------------------------------------------------------------------


def _reordered_yaml(data: dict[str, object]) -> str:
    """The same values with sections and keys in reverse order and other comments."""

    def reverse(node: object) -> object:
        if isinstance(node, dict):
            return {key: reverse(node[key]) for key in reversed(list(node))}
        return node

    body = yaml.safe_dump(reverse(data), sort_keys=False)
    return "".join(f"{line}  # other comment {i}\n" for i, line in enumerate(body.splitlines()))


def test_hash_ignores_key_order_and_comments(tmp_path: Path) -> None:
    data = read_config_dict(CONFIGS_DIR / "trn2.yaml")
    path = _write(tmp_path, _reordered_yaml(data))
    assert path.read_text() != (CONFIGS_DIR / "trn2.yaml").read_text()
    assert config_hash(load_config(path)) == config_hash(load_config("trn2"))


def test_hash_changes_with_a_value(tmp_path: Path) -> None:
    data = read_config_dict(CONFIGS_DIR / "trn2.yaml")
    data["dma"]["start_latency_ns"] = 1301
    path = _write(tmp_path, yaml.safe_dump(data))
    assert config_hash(load_config(path)) != config_hash(load_config("trn2"))


def test_hash_of_identity_override_is_unchanged() -> None:
    same = load_config("trn2", ["tensor_engine.rows=128"])
    assert config_hash(same) == config_hash(load_config("trn2"))
    assert re.fullmatch(r"[0-9a-f]{16}", config_hash(same))


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_presets_have_distinct_hashes(name: str) -> None:
    others = {config_hash(load_config(n)) for n in PRESET_NAMES if n != name}
    assert config_hash(load_config(name)) not in others


# ---- JSON schema ------------------------------------------------------------------------------


def test_committed_json_schema_is_current() -> None:
    assert SCHEMA_PATH.read_text() == json_schema_text(), (
        "regenerate with: hwsim config schema -o configs/hwsim-config.schema.json"
    )


# ---- peaks (HARDWARE.md derived numbers) ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dtype", "tflops"),
    [
        ("trn1", "bf16", 91.75),  # §2.1 derived; [S1] "92"
        ("trn2", "bf16", 78.6),  # §2.1 derived; [S2] "79"
        ("trn3", "bf16", 78.6),  # §2.1 derived; [S3] "79"
        ("trn1", "fp8_e4m3", 91.75),  # §0 FP8 = BF16 on v2 (cFP8) [S1]
        ("trn2", "fp8_e4m3", 157.3),  # §0 158 [S2] (double row)
        ("trn2", "fp32", 19.66),  # §0 "20" [S2]: 4x the BF16 cost
        ("trn1", "fp32", 22.94),  # §0 "23" [S1]
    ],
)
def test_peak_flops_match_hardware_md(name: str, dtype: str, tflops: float) -> None:
    peak = peaks.peak_flops_per_s(load_config(name), dtype)
    assert peak == pytest.approx(tflops * 1e12, rel=1e-3)


def test_chip_peak_is_cores_times_core_peak() -> None:
    config = load_config("trn2")
    chip = peaks.chip_peak_flops_per_s(config, "bf16")
    assert chip == 8 * peaks.peak_flops_per_s(config, "bf16")


def test_tiny_peak_is_easy_to_check_by_hand() -> None:
    # 2 x 32 x 32 FLOP/cycle x 1000 MHz
    assert peaks.peak_flops_per_s(load_config("tiny"), "bf16") == 2 * 32 * 32 * 1e9


@pytest.mark.parametrize(
    ("name", "dma_gb_s", "sbuf_mib", "hbm_gb_s_per_core"),
    [
        ("trn1", 272, 24, 410),  # §2.5 272 GB/s [S11]; §1.4 24 MiB [S1]; 410 GB/s per core [S35]
        ("trn2", 368, 28, 362.5),  # §2.5 368 GB/s [S11]; 28 MiB [S2]; 2.9 TB/s / 8 cores
        ("trn3", 528, 32, 587.5),  # §2.5 528 GB/s [S11]; 32 MiB [S3]; 4.7 TB/s / 8 cores
    ],
)
def test_memory_and_dma_peaks(
    name: str, dma_gb_s: float, sbuf_mib: int, hbm_gb_s_per_core: float
) -> None:
    config = load_config(name)
    assert peaks.dma_bandwidth_bytes_per_ns_per_core(config) == dma_gb_s
    assert peaks.sbuf_bytes_per_core(config) == sbuf_mib << 20
    assert peaks.psum_bytes_per_core(config) == 2 << 20  # §0 2 MiB on every generation
    assert peaks.psum_bank_fp32_elements(config) == 512
    assert peaks.hbm_bandwidth_bytes_per_ns_per_core(config) == hbm_gb_s_per_core


@pytest.mark.parametrize(("name", "gib"), [("trn1", 32), ("trn2", 96), ("trn3", 144)])
def test_hbm_capacity_per_chip(name: str, gib: int) -> None:
    assert peaks.hbm_capacity_bytes_per_chip(load_config(name)) == gib << 30


def test_element_rates_fall_back_to_fp32() -> None:
    config = load_config("trn3")
    scalar = peaks.compute_engine(config, "scalar")
    assert peaks.elements_per_cycle(scalar, "bf16") == 256  # §1.3 v4 ScalarE [S3]
    assert peaks.elements_per_cycle(scalar, "int32") == 128
    assert peaks.elements_per_s(scalar, "fp32") == 128 * 1200e6


def test_unknown_compute_engine() -> None:
    with pytest.raises(ValueError, match="unknown compute engine 'tensor'; valid: vector"):
        peaks.compute_engine(load_config("tiny"), "tensor")
