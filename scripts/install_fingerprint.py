"""What each step of scripts/install was last run for: `deps` (pyproject.toml) or `build` (what the compiled
modules are built from). Files the build writes itself (the generated codecs) are left out, so that a
finished build does not look changed to the next run."""
import hashlib
import pathlib
import runpy
import sys

# Written by setup.py from the declarations in protocol/ (protocol/codegen.py), which are counted already.
BUILD_OUTPUTS = {pathlib.Path("protocol", "_generated_codecs.py")}


def inputs(what: str) -> list[pathlib.Path]:
    files = [pathlib.Path("pyproject.toml")]
    if what == "build":
        files += [pathlib.Path("setup.py"),
                  *(p for p in sorted(pathlib.Path("protocol").rglob("*.py")) if p not in BUILD_OUTPUTS)]
        for module in runpy.run_path("protocol/compiled.py")["COMPILED_MODULES"]:
            if module.startswith("cohort.coordinator."):
                base = pathlib.Path("coordinator", *module.split(".")[2:])
                files += [p for p in (base.with_suffix(".py"), base.with_suffix(".pxd")) if p.is_file()]
    return files


def fingerprint(what: str) -> str:
    digest = hashlib.sha256()
    for f in inputs(what):
        digest.update(str(f).encode() + hashlib.sha256(f.read_bytes()).digest())
    return digest.hexdigest()


if __name__ == "__main__":
    print(fingerprint(sys.argv[1]))
