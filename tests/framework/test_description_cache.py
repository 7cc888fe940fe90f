"""Parsed descriptions kept on disk (devices/description.py, issue 31 #5): a second load reads
the kept result instead of parsing, equals a fresh parse for every bundled device, and a TOML
that changed, a file that does not read back, or a process without a kernel cache folder is
parsed again."""
from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from accelstub.devices import DEVICES
from accelstub.devices import description as desc_mod
from accelstub.devices.description import load_description, parse_description

from .test_description_loader import REGION, block

#: a one-register description (the loader tests' block and region) with ``title`` and ``reset``
#: to fill in
TOY = """
[device]
name = "toy"
title = "{title}"
""" + block("""
  [[block.register]]
  name = "CTRL"
  offset = 0

    [[block.register.field]]
    name = "en"
    bits = "0"
    reset = {reset}
""") + REGION


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "kernels"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(folder))
    return folder / "accelstub-descriptions"


@pytest.fixture
def parses(monkeypatch):
    """How many times a TOML text was parsed (each miss of the cache parses once)."""
    count = [0]
    real = tomllib.loads

    def counted(text: str):
        count[0] += 1
        return real(text)

    monkeypatch.setattr(tomllib, "loads", counted)
    return count


def test_a_second_load_reads_the_kept_description(tmp_path, cache_dir, parses):
    path = tmp_path / "toy.toml"
    path.write_text(TOY.format(title="Toy", reset=1))
    first = load_description(path)
    assert parses[0] == 1 and len(list(cache_dir.iterdir())) == 1
    second = load_description(path)
    assert parses[0] == 1  # not parsed again
    assert second == first and second is not first
    assert second.register("CTRL").reset == 1


def test_a_changed_toml_is_read_again(tmp_path, cache_dir, parses):
    path = tmp_path / "toy.toml"
    path.write_text(TOY.format(title="Toy", reset=1))
    assert load_description(path).register("CTRL").reset == 1
    path.write_text(TOY.format(title="Toy", reset=0))  # same size, maybe the same mtime
    changed = load_description(path)
    assert parses[0] == 2
    assert changed.register("CTRL").reset == 0
    assert len(list(cache_dir.iterdir())) == 1  # replaced, not added to


def test_a_file_that_does_not_read_back_is_parsed_again(tmp_path, cache_dir, parses):
    path = tmp_path / "toy.toml"
    path.write_text(TOY.format(title="Toy", reset=1))
    load_description(path)
    (kept,) = cache_dir.iterdir()
    blob = kept.read_bytes()
    kept.write_bytes(blob[:len(blob) // 2])  # cut short, as by a crash
    assert load_description(path).title == "Toy"
    assert parses[0] == 2


def test_without_a_kernel_cache_folder_nothing_is_kept(tmp_path, monkeypatch, parses):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    path = tmp_path / "toy.toml"
    path.write_text(TOY.format(title="Toy", reset=1))
    load_description(path)
    load_description(path)
    assert parses[0] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["toy.toml"]


@pytest.mark.parametrize("device", DEVICES)
def test_a_kept_bundled_description_equals_a_fresh_parse(device, cache_dir, parses):
    text = resources.files("accelstub.configs").joinpath(f"{device}.toml").read_text()
    source = f"configs/{device}.toml"
    fresh = parse_description(tomllib.loads(text), source)
    desc_mod._parse(text, source)  # writes the cache
    kept = desc_mod._parse(text, source)
    assert parses[0] == 2  # the fresh parse and the first _parse; the second read the file
    assert kept == fresh
    assert [r.name for r in kept.registers] == [r.name for r in fresh.registers]
    reg = fresh.registers[-1]
    assert kept.register(reg.name).address == reg.address  # the name index came back too
    assert kept.register(reg.name).definition.view(reg.reset).raw == reg.reset
