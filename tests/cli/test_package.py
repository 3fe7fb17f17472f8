"""The installed package: `cmake --install` puts bin/mlaserve under a prefix and nothing else,
and `cpack` writes a .deb holding that binary whose dependencies are Debian packages.
--binary is the built mlaserve; --work-dir a folder for the install and the package; the build
folder is the binary's own."""
import os
import subprocess


def test_install_puts_only_the_binary_under_the_prefix(binary, work_dir):
    build = os.path.dirname(os.path.abspath(binary))
    prefix = os.path.join(work_dir, "prefix")
    subprocess.run(["cmake", "--install", build, "--prefix", prefix], check=True, capture_output=True)
    installed = [os.path.relpath(os.path.join(root, name), prefix) for root, _, names in os.walk(prefix) for name in names]
    assert installed == ["bin/mlaserve"], installed
    version = subprocess.run([os.path.join(prefix, "bin", "mlaserve"), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("mlaserve "), version.stderr


def test_cpack_writes_a_deb_with_debian_dependencies(binary, work_dir):
    build = os.path.dirname(os.path.abspath(binary))
    out = os.path.join(work_dir, "deb")
    subprocess.run(["cpack", "--config", os.path.join(build, "CPackConfig.cmake"), "-B", out], check=True,
                   capture_output=True)
    debs = [name for name in os.listdir(out) if name.endswith(".deb")]
    assert len(debs) == 1, os.listdir(out)
    deb = os.path.join(out, debs[0])
    contents = subprocess.run(["dpkg-deb", "-c", deb], check=True, capture_output=True, text=True).stdout
    assert [line.split()[-1] for line in contents.splitlines() if not line.startswith("d")] == ["./usr/bin/mlaserve"]
    depends = subprocess.run(["dpkg-deb", "-f", deb, "Depends"], check=True, capture_output=True, text=True).stdout
    assert "libc6" in depends and "libfmt" in depends and "libspdlog" in depends, depends
