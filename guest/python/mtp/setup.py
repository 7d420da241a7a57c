"""The C half of mtp; everything else is declared in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mtp._core",
            sources=[
                "csrc/module.c",
                "csrc/tracker.c",
                "csrc/objtable.c",
                "csrc/pages.c",
                "csrc/policy.c",
                "csrc/numa.c",
                "csrc/frames.c",
                "csrc/gcroots.c",
                "csrc/metamem.c",
            ],
            depends=[
                "csrc/frames.h",
                "csrc/gcroots.h",
                "csrc/metamem.h",
                "csrc/numa.h",
                "csrc/objtable.h",
                "csrc/pages.h",
                "csrc/policy.h",
                "csrc/tracker.h",
            ],
            extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers", "-Werror"],
            libraries=["m"],
        )
    ]
)
