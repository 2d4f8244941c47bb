"""The family registry: every family by name and alias, each module loaded when its family is asked for."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pptl.errors import InputError
from pptl.schedules import _WHERE, FAMILIES, get_family, names

ROOT = Path(__file__).resolve().parent.parent.parent


def test_every_family_is_registered_under_its_own_name() -> None:
    assert list(FAMILIES) == names() == list(_WHERE)
    assert all(name == fam.name for name, fam in FAMILIES.items())
    assert len(names()) == 15


def test_names_and_aliases_resolve_case_insensitively() -> None:
    for fam in FAMILIES.values():
        assert get_family(f" {fam.name.upper()} ") is fam
        for alias in fam.aliases:
            assert get_family(alias) is fam
    assert get_family("vpp").name == "interleaved-1f1b"


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(InputError, match=r"unknown schedule 'nope'; known schedules: gpipe, 1f1b, interleaved-1f1b"):
        get_family("nope")


def test_asking_for_one_family_loads_only_its_module() -> None:
    code = ("import sys; from pptl.schedules import get_family; get_family('interleaved-1f1b'); "
            "print(sorted(m for m in sys.modules if m.startswith('pptl.schedules.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == ("['pptl.schedules._assemble', 'pptl.schedules._common', 'pptl.schedules._order', "
                           "'pptl.schedules.interleaved']")
