"""pytest options shared by the Python tests CTest runs: the binary under test and a work
directory of the build's (`--binary`, `--work-dir`), and a second executable where one is
driven (`--tool`)."""
import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--binary", required=True, help="the executable under test (build/mlaserve, a dump tool)")
    parser.addoption("--work-dir", required=True, help="a directory the test may write to")
    parser.addoption("--tool", help="a second executable the test drives (a dump tool)")


@pytest.fixture(scope="session")
def binary(request):
    return request.config.getoption("--binary")


@pytest.fixture(scope="session")
def tool(request):
    return request.config.getoption("--tool")


@pytest.fixture(scope="session")
def work_dir(request):
    directory = request.config.getoption("--work-dir")
    os.makedirs(directory, exist_ok=True)
    return directory
