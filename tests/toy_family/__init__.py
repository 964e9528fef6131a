"""A minimal kernel family, in its own folder: a config with its name grammar, a render function and two
templates. tests/test_family_plugin.py registers it with one call and builds it."""

from pathlib import Path
from string import Template

from cutlass_ext.families import Family

from .config import ToyConfig

TEMPLATE = Path(__file__).with_name("toy.cu.in")
_INSTANCE = Template(TEMPLATE.with_name("toy_instance.in").read_text())


def render_instance(config: ToyConfig) -> str:
    return _INSTANCE.substitute(name=config.name, factor=config.factor)


FAMILY = Family(name="toy", config=ToyConfig, template=TEMPLATE, render_instance=render_instance)
