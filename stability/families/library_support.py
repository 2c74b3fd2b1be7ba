"""The library releases the library family supports (docs/library-models.md, "Supported releases").

`MINIMUM` holds the oldest release of each library that the family runs under: its names resolved
by the library's public API (`stability.families.library`), its models built, discovered, probed and
rescaled by the init rule. The floors are measured, not guessed: the matrix (`noxfile.py`) runs the
zoo's ci cases under each release of `MATRIX`, and `tests/test_releases.py` runs the oldest. An older
release is refused at load, in one line naming the minimum (exit 2). `FIRST` holds, for the zoo's
families that came later than the floor, the release that added the class, so a spec naming one
under an older release is refused naming that release rather than "no such class".
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from stability.errors import SpecError

__all__ = [
    "quiet_imports",
    "import_library",
    "MINIMUM",
    "MATRIX",
    "FIRST",
    "KEY_FIRST",
    "ZOO_FIRST",
    "first_key_release",
    "installed",
    "check_release",
    "first_release",
    "needed_release",
    "older_release",
    "expected_refusal",
]

#: The oldest release of each library the family supports (module docstring).
MINIMUM: Mapping[str, str] = {"transformers": "4.40.0", "timm": "0.9.0", "torchvision": "0.15.0"}

#: The releases the matrix runs (noxfile.py): the oldest and newest supported in CI (.ci/run), all nightly.
MATRIX: Mapping[str, tuple[str, ...]] = {
    "transformers": ("4.40.2", "4.45.2", "4.53.3", "4.54.1", "4.57.6", "5.0.0", "5.24.0"),
    "timm": ("0.9.0", "0.9.16", "1.0.9", "1.0.10", "1.0.16", "1.0.31"),
    "torchvision": ("0.15.0", "0.15.2", "0.16.2"),
}

#: Zoo families added after the floor: (library, class) → the first release that has it.
FIRST: Mapping[tuple[str, str], str] = {
    ("transformers", "Phi3Model"): "4.41.0",
    ("transformers", "Gemma2Model"): "4.42.0",
    ("transformers", "Qwen3Model"): "4.51.0",
    ("timm", "resnetv2_18"): "1.0.10",
}


@contextlib.contextmanager
def quiet_imports() -> Iterator[None]:
    """Import a library without its noise: torchvision's warning that its compiled image
    extension does not load (its models are pure Python; docs/library-models.md, section 7).
    timm imports torchvision too."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Failed to load image Python extension")
        yield


def import_library(name: str) -> Any:
    """The module `name` of a library, imported inside `quiet_imports` (every import of a
    library by the family goes through here)."""
    with quiet_imports():
        return importlib.import_module(name)


def installed(library: str) -> str:
    """The version of `library` that this process imports (its `__version__`)."""
    return str(import_library(library).__version__)


def _older(version: str, than: str) -> bool:
    try:
        return Version(version) < Version(than)
    except InvalidVersion:
        return False


def check_release(library: str, *, file: str, key: str, model: str) -> None:
    """A SpecError (exit 2) when the imported `library` is older than `MINIMUM`'s release."""
    have, floor = installed(library), MINIMUM.get(library)
    if floor is not None and _older(have, floor):
        problem = (
            f"needs {library} >= {floor}, the oldest release the library family supports (this environment has {have})"
        )
        raise SpecError(file, key, problem, value=model, fix=f"pip install --no-deps '{library}>={floor}'")


def older_release(library: str) -> str:
    """ " in transformers 4.40.2" when the imported release is older than the newest the matrix
    measures (a key a spec sets may have come later), else "": for a refusal's message."""
    have, newest = installed(library), MATRIX.get(library, ("",))[-1]
    return f" in {library} {have}" if newest and _older(have, newest) else ""


#: Config keys of the zoo's families that came later than the floor: (library, model class, key) →
#: (the first release whose config takes it, the config field), so a spec setting one under an
#: older release is refused naming that release rather than "not a config key".
KEY_FIRST: Mapping[tuple[str, str, str], tuple[str, str]] = {
    ("transformers", "MistralModel", "head_dim"): ("4.43.0", "MistralConfig.head_dim"),
    ("transformers", "MixtralModel", "head_dim"): ("4.47.0", "MixtralConfig.head_dim"),
    ("transformers", "LlamaModel", "rope_parameters"): ("5.0.0", "LlamaConfig.rope_parameters"),
}


def first_key_release(library: str, name: str, key: str) -> tuple[str, str] | None:
    """(the release that added config `key` of model `name`, the field) when the imported `library`
    is older than it (`KEY_FIRST`), else None."""
    first = KEY_FIRST.get((library, name, key))
    return first if first is not None and _older(installed(library), first[0]) else None


def first_release(library: str, name: str) -> str | None:
    """The release that added `name`, when the imported `library` is older than it (else None)."""
    first = FIRST.get((library, name))
    return first if first is not None and _older(installed(library), first) else None


#: The zoo's specs (file names) that need a later release than `MINIMUM`'s, measured by loading
#: each under the releases around it: a class added later (`FIRST`) or a config key their spec
#: sets that older configs do not take (`head_dim` of Llama, Mistral and Mixtral).
ZOO_FIRST: Mapping[str, tuple[str, str]] = {
    "gemma2.toml": ("transformers", "4.42.0"),
    "llama.toml": ("transformers", "5.0.0"),
    "mistral.toml": ("transformers", "4.43.0"),
    "mixtral.toml": ("transformers", "4.47.0"),
    "phi3.toml": ("transformers", "4.41.0"),
    "qwen3.toml": ("transformers", "4.51.0"),
    "timm_resnetv2_zero.toml": ("timm", "1.0.16"),
}


def expected_refusal(spec_file: str, library: str | None = None) -> str | None:
    """ "transformers >= 4.45.0" when the imported release is older than the one the zoo spec
    `spec_file` (of `library`, where given) needs (`MINIMUM`, then `ZOO_FIRST`), else None."""
    floor = MINIMUM.get(library) if library is not None else None
    if library is not None and floor is not None and _older(installed(library), floor):
        return f"{library} >= {floor}"
    library, first = ZOO_FIRST.get(spec_file, (None, None))
    if library is not None and first is not None and _older(installed(library), first):
        return f"{library} >= {first}"
    return None


#: The zoo's specs whose declared init is not the one some supported releases ship: file name →
#: the ranges [first, end) of the library's releases that built the model differently at init,
#: each with its source. A zoo spec states what its family's init intends on the current release;
#: under a release in such a range its gate must fail (the matrix checks that it does: the spec
#: still sees the difference), and the release stays supported.
INIT_DIFFERS: Mapping[str, tuple[tuple[str, str, str, str], ...]] = {
    "mamba.toml": (
        (
            "transformers",
            MINIMUM["transformers"],
            "4.54.0",
            "every nn.Linear at PyTorch's default U(±1/√fan-in), not N(0, initializer_range²): "
            "huggingface/transformers#38987",
        ),
    ),
    "gpt2.toml": (
        (
            "transformers",
            "5.0.0",
            "5.15.0",
            "c_proj without its 1/√(2·n_layer) scale: huggingface/transformers#47458, fixed by #47459",
        ),
    ),
}


def expected_init_difference(spec_file: str) -> str | None:
    """Why the imported release builds zoo spec `spec_file`'s model with another init than the spec
    declares (`INIT_DIFFERS`), else None."""
    for library, first, end, why in INIT_DIFFERS.get(spec_file, ()):
        have = installed(library)
        if not _older(have, first) and _older(have, end):
            return f"{library} {have} (releases {first} to before {end}): {why}"
    return None


#: Config settings that build under a release but do not work before a later one: (library, model
#: name, config key) → (the first release where they work, what fails before it), measured by
#: building the zoo spec that sets them under the releases around it. A spec setting one under an
#: older release is refused at load, in one line naming the release.
BROKEN_BEFORE: Mapping[tuple[str, str, str], tuple[str, str]] = {
    ("timm", "resnetv2_18", "zero_init_last"): (
        "1.0.16",
        "its PreActBasic blocks' zero_init_last reads conv3, which a basic block does not have "
        "(AttributeError at build)",
    ),
}


def needed_release(library: str, name: str, config: Mapping[str, object]) -> str | None:
    """The newest release that model `name` with `config` needs and the imported `library` is
    older than: the one that added the model (`FIRST`), a config key it sets (`KEY_FIRST`) or the one
    that builds a setting (`BROKEN_BEFORE`); None when the imported release has them all. A refusal
    names this one, so a user who installs it is not refused again for the next."""
    needs = [FIRST.get((library, name))]
    needs += [KEY_FIRST.get((library, name, k), (None, ""))[0] for k in config]
    needs += [BROKEN_BEFORE.get((library, name, k), (None, ""))[0] for k in config]
    have = installed(library)
    older = [n for n in needs if n is not None and _older(have, n)]
    return max(older, key=Version) if older else None


def check_working(library: str, name: str, config: Mapping[str, object], *, file: str, key: str) -> None:
    """A SpecError (exit 2) when `config` sets a key `BROKEN_BEFORE` lists and the imported release
    is older than the first that builds it."""
    for setting in config:
        first, why = BROKEN_BEFORE.get((library, name, setting), (None, ""))
        if first is not None and _older(installed(library), first):
            problem = (
                f"sets {setting}, which {library} {installed(library)} cannot build: {why}; it works "
                f"from {library} {first}"
            )
            raise SpecError(
                file,
                f"{key}.{setting}",
                problem,
                value=config[setting],
                fix=f"pip install --no-deps '{library}>={first}', or leave {setting} out",
            )
