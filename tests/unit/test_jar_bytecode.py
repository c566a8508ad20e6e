"""The jar runs on Java 8 NodeManagers: every class in it (ours, and the py4j and gson it
carries) is Java 8 bytecode or older (major version 52), so a Java 8 JVM can load the AM. The
jar is the one this checkout built (target/) or the installed wheel's (tony_py.paths)."""

from __future__ import annotations

import struct
import zipfile

import pytest

from tony_py import paths
from tony_py.errors import SetupError

pytestmark = pytest.mark.unit
JAVA_8 = 52


@pytest.fixture(scope="module")
def jar():
    try:
        return paths.locate_jar()
    except SetupError as exc:  # `scripts/test -m unit` installs no JDK or Maven; CI always builds the jar
        pytest.skip(f"no tony-py jar: {exc}")


def class_versions(jar) -> dict[str, int]:
    versions = {}
    with zipfile.ZipFile(jar) as z:
        for name in z.namelist():
            if name.endswith(".class") and not name.startswith("META-INF/"):
                magic, _minor, major = struct.unpack(">IHH", z.read(name)[:8])
                assert magic == 0xCAFEBABE, name
                versions[name] = major
    return versions


def test_every_class_in_the_jar_loads_on_java_8(jar):
    versions = class_versions(jar)
    ours = {n for n in versions if n.startswith("io/tonypy/") and "/shaded/" not in n}
    assert len(ours) > 10 and any(n.startswith("py4j/") for n in versions)  # the scan read the jar
    too_new = {n: v for n, v in versions.items() if v > JAVA_8}
    assert not too_new, f"classes newer than Java 8 bytecode ({JAVA_8}): {sorted(too_new.items())[:10]}"
    assert {versions[n] for n in ours} == {JAVA_8}  # ours are built with --release 8 (pom.xml)
