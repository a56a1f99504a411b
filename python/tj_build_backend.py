"""A PEP 517 / PEP 660 build backend for the tensorjit package.

Why not setuptools: the package is pure Python plus one prebuilt shared
library, and a backend with no requirements lets ``pip install ./python``
work offline (build isolation then installs nothing). It writes wheels by
hand (they are zip files with a dist-info directory).

Which libtensorjit goes into the wheel, first found wins:

1. ``--config-settings library=PATH``;
2. ``$TJ_LIBRARY``;
3. a ``libtensorjit.so*`` already in ``tensorjit/``;
4. ``../build/libtensorjit.so`` (the build directory the README uses).

With a library the wheel is tagged for this platform; without one it is a
pure ``py3-none-any`` wheel that loads the library at run time.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import zipfile
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "tensorjit"


def _project() -> Dict[str, Any]:
    """The [project] table of pyproject.toml."""
    path = os.path.join(HERE, "pyproject.toml")
    with open(path, "rb") as f:
        data = f.read()
    try:
        import tomllib  # Python >= 3.11

        return tomllib.loads(data.decode())["project"]
    except ImportError:
        pass
    # A minimal reader for the flat keys this file uses.
    project: Dict[str, Any] = {}
    section = None
    for line in data.decode().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
            continue
        m = re.match(r'(\w[\w-]*)\s*=\s*(.*)', line)
        if section != "project" or not m:
            continue
        key, value = m.group(1), m.group(2)
        if value.startswith('"'):
            project[key] = value.strip('"')
        elif value.startswith("["):
            project[key] = re.findall(r'"([^"]*)"', value)
        elif value.startswith("{"):
            project[key] = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', value))
    return project


def _find_library(config_settings: Optional[Dict[str, Any]]) -> Optional[str]:
    settings = config_settings or {}
    for candidate in (settings.get("library"), os.environ.get("TJ_LIBRARY")):
        if candidate:
            if not os.path.isfile(candidate):
                raise FileNotFoundError(
                    f"tensorjit build: library {candidate!r} does not exist")
            return candidate
    bundled = sorted(glob.glob(os.path.join(HERE, PACKAGE,
                                            "libtensorjit.so*")))
    if bundled:
        return bundled[0]
    default = os.path.join(HERE, os.pardir, "build", "libtensorjit.so")
    return default if os.path.isfile(default) else None


def _metadata(project: Dict[str, Any]) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}",
             f"Version: {project['version']}"]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    license_ = project.get("license")
    if isinstance(license_, dict) and license_.get("text"):
        lines.append(f"License: {license_['text']}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    for dep in project.get("dependencies", []):
        lines.append(f"Requires-Dist: {dep}")
    body = ""
    readme = os.path.join(HERE, project.get("readme") or "README.md")
    if os.path.isfile(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _dist_info(project: Dict[str, Any]) -> str:
    return f"{project['name']}-{project['version']}.dist-info"


def _tag(pure: bool) -> str:
    if pure:
        return "py3-none-any"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"py3-none-{plat}"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return f"{name},sha256={digest.rstrip(b'=').decode()},{len(data)}"


def _write_wheel(directory: str, files: List[Tuple[str, bytes]],
                 project: Dict[str, Any], pure: bool) -> str:
    tag = _tag(pure)
    name = f"{project['name']}-{project['version']}-{tag}.whl"
    info = _dist_info(project)
    wheel_meta = ("Wheel-Version: 1.0\nGenerator: tj_build_backend\n"
                  f"Root-Is-Purelib: {'true' if pure else 'false'}\n"
                  f"Tag: {tag}\n")
    files = files + [(f"{info}/METADATA", _metadata(project).encode()),
                     (f"{info}/WHEEL", wheel_meta.encode()),
                     (f"{info}/top_level.txt", f"{PACKAGE}\n".encode())]
    record = [_record_line(n, d) for n, d in files]
    record.append(f"{info}/RECORD,,")
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    path = os.path.join(directory, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in files:
            zi = zipfile.ZipInfo(n, date_time=(2024, 1, 1, 0, 0, 0))
            # Keep the library executable, like the loader expects.
            mode = 0o755 if ".so" in os.path.basename(n) else 0o644
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, d)
    return name


def _package_files() -> List[Tuple[str, bytes]]:
    out = []
    root = os.path.join(HERE, PACKAGE)
    for fname in sorted(os.listdir(root)):
        if fname.endswith(".py") or fname == "py.typed":
            with open(os.path.join(root, fname), "rb") as f:
                out.append((f"{PACKAGE}/{fname}", f.read()))
    return out


#===--- PEP 517 hooks ---===#


def get_requires_for_build_wheel(config_settings: Any = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Any = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Any = None
                                    ) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Any = None) -> str:
    project = _project()
    info = _dist_info(project)
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    with open(os.path.join(metadata_directory, info, "METADATA"), "w",
              encoding="utf-8") as f:
        f.write(_metadata(project))
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Any = None,
                metadata_directory: Optional[str] = None) -> str:
    project = _project()
    files = _package_files()
    library = _find_library(config_settings)
    if library:
        with open(os.path.realpath(library), "rb") as f:
            # Named by its SONAME's file name: what the loader looks for.
            files.append((f"{PACKAGE}/libtensorjit.so", f.read()))
    return _write_wheel(wheel_directory, files, project, pure=not library)


def build_editable(wheel_directory: str, config_settings: Any = None,
                   metadata_directory: Optional[str] = None) -> str:
    """An editable install: a .pth file putting this directory on
    sys.path (the library then comes from TJ_LIBRARY or the system)."""
    project = _project()
    files = [(f"_{PACKAGE}_editable.pth", (HERE + "\n").encode())]
    return _write_wheel(wheel_directory, files, project, pure=True)


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    project = _project()
    base = f"{project['name']}-{project['version']}"
    path = os.path.join(sdist_directory, base + ".tar.gz")
    members = ["pyproject.toml", "tj_build_backend.py", "README.md"] + [
        n for n, _ in _package_files()]
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            full = os.path.join(HERE, member)
            if os.path.isfile(full):
                tar.add(full, arcname=f"{base}/{member}")
        pkg_info = _metadata(project).encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        tar.addfile(ti, io.BytesIO(pkg_info))
    return os.path.basename(path)
