"""Writes the heterps wheel from the build's package directory: the Python part, the native
module and the `heterps` command (bin/heterps), so that `pip install heterps-*.whl` works anywhere
this build's shared libraries are (the same distribution), with no path into the build tree.

    python3 make_wheel.py PACKAGE_DIR CLI VERSION OUT_DIR
    python3 make_wheel.py --name VERSION      (prints the wheel's file name)

A wheel is a zip file with a .dist-info directory (PEP 427, PEP 376's RECORD); this writes one
with the standard library alone, so the build needs no setuptools, wheel or network. The tags are
this interpreter's (cp311-cp311-linux_x86_64 on Debian 12).
"""

import base64
import hashlib
import os
import sys
import sysconfig
import zipfile


def tags():
    version = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return version, version + sys.abiflags, platform


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def wheel_name(version):
    python, abi, platform = tags()
    return f"heterps-{version}-{python}-{abi}-{platform}.whl"


def main(package_dir, cli, version, out_dir):
    python, abi, platform = tags()
    dist_info = f"heterps-{version}.dist-info"
    files = []  # (name in the wheel, bytes, executable)
    # The package's own files only: a build tree may hold others from earlier builds.
    names = ["__init__.py"] + sorted(n for n in os.listdir(package_dir)
                                     if n.startswith("_core.") and n.endswith(".so"))
    if len(names) != 2:
        sys.exit(f"make_wheel.py: {package_dir} has no single _core module: {names}")
    for name in names:
        with open(os.path.join(package_dir, name), "rb") as f:
            files.append(("heterps/" + name, f.read(), name.endswith(".so")))
    with open(cli, "rb") as f:
        files.append(("heterps/bin/heterps", f.read(), True))
    metadata = (f"Metadata-Version: 2.1\nName: heterps\nVersion: {version}\n"
                "Summary: Plan and train sparse deep-learning models on heterogeneous hardware "
                "(HeterPS)\nRequires-Python: >=3.9\n").encode()
    wheel = (f"Wheel-Version: 1.0\nGenerator: heterps make_wheel.py\nRoot-Is-Purelib: false\n"
             f"Tag: {python}-{abi}-{platform}\n").encode()
    files += [(f"{dist_info}/METADATA", metadata, False), (f"{dist_info}/WHEEL", wheel, False),
              (f"{dist_info}/top_level.txt", b"heterps\n", False)]
    record = "\n".join([record_line(n, d) for n, d, _ in files] + [f"{dist_info}/RECORD,,"]) + "\n"
    files.append((f"{dist_info}/RECORD", record.encode(), False))

    os.makedirs(out_dir, exist_ok=True)
    for old in os.listdir(out_dir):
        if old.endswith(".whl"):
            os.remove(os.path.join(out_dir, old))
    target = os.path.join(out_dir, wheel_name(version))
    partial = target + ".partial"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        for name, data, executable in files:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            z.writestr(info, data)
    os.replace(partial, target)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--name":
        print(wheel_name(sys.argv[2]))
        sys.exit(0)
    if len(sys.argv) != 5:
        sys.exit("usage: make_wheel.py PACKAGE_DIR CLI VERSION OUT_DIR")
    main(*sys.argv[1:])
