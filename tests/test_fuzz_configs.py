"""Fuzz config files in all three syntaxes (TOML, YAML, JSON) through plan, check, render and export:
unicode, huge and negative numbers, NaN/inf, deep nesting, duplicate keys, YAML aliases and tags,
TOML dates, empty files, binary garbage and truncation."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from fuzzing import EXAMPLES, clean_run, mutate_bytes, mutate_json, to_toml, to_yaml, write_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pptl.formats.structured import read_structured

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CONFIGS = sorted(p for p in FIXTURES.glob("*") if p.suffix in (".yaml", ".toml", ".json"))

_SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

_SUFFIXES = [".toml", ".yaml", ".json"]
# Values a config field should survive besides the generic ones (fuzzing._NASTY).
_VALUES = [float("nan"), float("inf"), float("-inf"), -0.0, 2**64, 2**63 - 1, -(2**63), 10**100, 1e-320, -1.5,
           "\u202e1f1b", "1f1b\u0000", "ｐｐ", "１", "\U0001f600" * 50, "0x10", "1e3", "true", [1] * 1000]

#: Text that is valid or nearly valid syntax, appended to a config (each syntax its own).
_SNIPPETS = {
    ".toml": ['pp = 3\n', '[costs]\nF = 1\n[costs]\nB = 2\n', 'pp = 1979-05-27T07:32:00Z\n',
              'microbatches = 1979-05-27\n', 'pp = 0x7fffffffffffffff\n', 'pp = 1e400\n', 'pp = nan\n',
              '"" = 1\n', 'a.b.c.d = 1\n', '[[costs]]\nF = 1\n', 'x = """\n' + "y" * 100 + '\n"""\n',
              "costs = {F = 1, F = 2}\n", "\ufeffpp = 2\n", "x = [" * 200 + "]" * 200 + "\n"],
    ".yaml": ["pp: 3\n", "costs: {F: 1, F: 2}\n", "pp: !!python/object:os.system ls\n", "pp: .nan\n", "pp: .inf\n",
              "pp: 0o777\n", "pp: 1_000\n", "microbatches: 2001-12-14\n", "workload: !!binary aGVsbG8=\n",
              "options: !!set {a, b}\n", "? [a, b]\n: 1\n", "base: &b {F: 1}\ncosts:\n  <<: *b\n", "---\npp: 2\n",
              "options: &a [*a]\n", "pp: *undefined\n", "\t- x\n", "options: " + "[" * 200 + "]" * 200 + "\n",
              "\ufeffpp: 2\n", "pp: 2 # \u2603\n", "%YAML 1.1\n---\n"],
    ".json": ['{"pp": 2, "pp": 3}', '{"pp": NaN}', '{"pp": Infinity}', '{"pp": 1e400}', '{"pp": -0}',
              '[' * 5000 + ']' * 5000, '{"\\ud800": 1}', '"just a string"', 'null', '{}'],
}


@pytest.fixture(scope="module")
def bases() -> list[tuple[str, dict]]:
    return [(p.suffix, read_structured(p)) for p in CONFIGS]


def _command(p: Path, rnd: random.Random) -> list[str]:
    return rnd.choice([["plan", str(p), "--output", "json"], ["check", str(p)], ["render", str(p), "--width", "80"],
                       ["export", str(p), "--to", "chrome"], ["plan", str(p), "--microbatches", "3", "--pp", "2"]])


def _nasty(data: object, rnd: random.Random) -> object:
    if isinstance(data, dict) and rnd.random() < 0.4:  # plausible sizes: reach planning and drawing
        out = dict(data)
        for k in rnd.sample(["pp", "microbatches", "vpp", "group_size", "memory_limit"], rnd.randint(1, 3)):
            out[k] = rnd.choice([1, 2, 3, 4, 8, 16, 64, 0.5, 100])
        return out
    out = mutate_json(data, rnd)
    if isinstance(out, dict) and rnd.random() < 0.5:
        out = dict(out)
        out[rnd.choice(["pp", "microbatches", "vpp", "memory_limit", "activation", "group_size", "schedule",
                        "split_backward"])] = rnd.choice(_VALUES)
    return out


def _serialise(data: object, suffix: str) -> str:
    try:
        return {".toml": to_toml, ".yaml": to_yaml, ".json": lambda d: __import__("json").dumps(d)}[suffix](data)
    except (ValueError, RecursionError, TypeError):
        return ""


@_SETTINGS
@given(st.data(), st.sampled_from(_SUFFIXES), st.randoms(use_true_random=False))
def test_fuzz_config_values(tmp_path: Path, bases, data, suffix: str, rnd: random.Random) -> None:
    """A fixture's config with nasty values, written in any of the three syntaxes."""
    _, base = data.draw(st.sampled_from(bases))
    p = tmp_path / f"c{suffix}"
    if suffix == ".json":
        write_json(p, _nasty(base, rnd))
    else:
        p.write_text(_serialise(_nasty(base, rnd), suffix), encoding="utf-8", errors="surrogatepass")
    clean_run(_command(p, rnd))


@_SETTINGS
@given(st.sampled_from(CONFIGS), st.randoms(use_true_random=False))
def test_fuzz_config_syntax(tmp_path: Path, src: Path, rnd: random.Random) -> None:
    """A fixture with near-valid syntax added: duplicate keys and tables, dates, tags, aliases, BOMs."""
    text = src.read_text()
    snippet = rnd.choice(_SNIPPETS[src.suffix])
    text = text + "\n" + snippet if src.suffix != ".json" or rnd.random() < 0.5 else snippet
    p = tmp_path / f"c{src.suffix}"
    p.write_text(text, encoding="utf-8")
    clean_run(_command(p, rnd))


@_SETTINGS
@given(st.sampled_from(CONFIGS), st.sampled_from(_SUFFIXES), st.randoms(use_true_random=False))
def test_fuzz_config_bytes_any_suffix(tmp_path: Path, src: Path, suffix: str, rnd: random.Random) -> None:
    """Mutated bytes, also under another syntax's suffix (a YAML file named .toml)."""
    p = tmp_path / f"c{suffix}"
    p.write_bytes(mutate_bytes(src.read_bytes(), rnd))
    clean_run(_command(p, rnd))


@pytest.mark.parametrize("suffix", _SUFFIXES)
@pytest.mark.parametrize("raw", [b"", b"\x00" * 64, bytes(range(256)), b"\xef\xbb\xbf", b"\xff\xfe{}", b"  \n\t\n"],
                         ids=["empty", "nul", "binary", "bom-only", "utf16-bom", "blank"])
def test_empty_and_garbage_files(tmp_path: Path, suffix: str, raw: bytes) -> None:
    p = tmp_path / f"c{suffix}"
    p.write_bytes(raw)
    code, err = clean_run(["plan", str(p)])
    assert code == 2 and err.startswith(f"error: {p}:"), err
