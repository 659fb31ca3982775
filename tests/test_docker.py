"""The Dockerfiles put everything an editable install and ``python launch.py`` need into the image: every
package that pyproject.toml's package discovery includes, the Hydra config directory, the entry point; and
the extras they install exist. (Building the images needs NVIDIA's / AMD's base images and a Docker daemon.)"""

import re
from fnmatch import fnmatch

import pytest

from tests.conftest import ROOT

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))


def copied(dockerfile) -> set[str]:
    sources = set()
    for line in dockerfile.read_text().splitlines():
        if line.startswith("COPY "):
            parts = [p for p in line.split()[1:] if not p.startswith("--")]
            sources.update(p.rstrip("/") for p in parts[:-1])
    return sources


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_holds_what_the_install_and_launch_need(dockerfile):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    includes = project["tool"]["setuptools"]["packages"]["find"]["include"]
    needed = {p.name for p in ROOT.iterdir() if p.is_dir() and any(p.rglob("*.py"))
              and any(fnmatch(p.name, pat) for pat in includes)}
    needed |= {"conf", "launch.py", "pyproject.toml", "README.md"}
    have = copied(dockerfile)
    assert "." in have or needed <= have, f"{dockerfile.name} does not COPY {sorted(needed - have)}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_extras_installed_by_the_image_exist(dockerfile):
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    wanted = {e for m in re.finditer(r'-e "\.\[([^\]]+)\]"', dockerfile.read_text()) for e in m.group(1).split(",")}
    assert wanted and wanted <= extras, f"{dockerfile.name} installs unknown extras {sorted(wanted - extras)}"
