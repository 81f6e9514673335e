"""Only the build's one rule pyproject.toml cannot say: the wheel leaves out the tests beside the code (test_*.py)
and conftest.py. setuptools ships every module of a listed package, and users of the wheel (the runtime image
included) get no use from them; in this checkout (editable installs) they stay importable, as the tests need. The
test support is not in a package of the wheel at all (tests/support/)."""

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithoutTests(build_py):
    def find_package_modules(self, package, package_dir):
        return [(pkg, module, path) for pkg, module, path in super().find_package_modules(package, package_dir)
                if not module.startswith("test_") and module != "conftest"]


setup(cmdclass={"build_py": BuildWithoutTests})
