"""The wheel carries the JVM half: `pip wheel .` / `python -m build` run Maven once and put the
shaded jar (the ApplicationMaster, the client bridge, the Python runtime `hadoop jar` unpacks),
the local cluster's definition (docker/hadoop-cluster: config templates and the poms its daemons'
jars are resolved from) and the build's pinned versions into tony_py/_bundled/, which
tony_py.paths reads when there is no checkout. An editable install (`pip install -e .`, what
scripts/bootstrap does) skips this: a checkout uses target/ and docker/hadoop-cluster as they are.

Everything else is declared in pyproject.toml; this file only adds the build step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
VERSION_PROPERTIES = ("hadoop.version", "distributedshell.version", "hadoop.api.version", "py4j.version")


class BuildWithJar(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        bundled = Path(self.build_lib) / "tony_py" / "_bundled"
        shutil.rmtree(bundled, ignore_errors=True)
        bundled.mkdir(parents=True)
        shutil.copy(build_jar(Path(self.build_lib).parent / "maven"), bundled / "tony-py.jar")
        shutil.copytree(ROOT / "docker" / "hadoop-cluster", bundled / "hadoop-cluster")
        (bundled / "build.json").write_text(json.dumps(pom_properties(), indent=1) + "\n")


def build_jar(out: Path) -> Path:
    """`mvn package` once, into `out` (never the checkout's target/, which a running cluster of
    the checkout may be using), with this build's interpreter making the runtime archive the
    jar carries (its py4j, defusedxml, psutil, rich and requests come from pyproject's build requirements)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        sys.exit("building the tony-py wheel needs Maven (mvn) and a JDK 11+ on PATH, once: the wheel carries "
                 "the jar they build, so installing the wheel needs neither")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    out = out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([mvn, "-q", "-B", "package", "-DskipTests", f"-Dtony.python={sys.executable}",
                    f"-Dtony.build.directory={out}"], cwd=ROOT, env=env, check=True)
    jars = [p for p in out.glob("tony-py-*.jar") if not p.name.startswith("original-")]
    if len(jars) != 1:
        sys.exit(f"expected one tony-py jar in {out}, found {[p.name for p in jars]}")
    return jars[0]


def pom_properties() -> dict[str, str]:
    root = ET.parse(ROOT / "pom.xml").getroot()
    return {name: root.find(f"m:properties/m:{name}", POM_NS).text.strip() for name in VERSION_PROPERTIES}


setup(cmdclass={"build_py": BuildWithJar})
