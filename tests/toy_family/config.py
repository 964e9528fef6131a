"""`ToyConfig`: a variant scales integers by `factor`; its name is `toy_f<factor>`."""

from dataclasses import dataclass
from typing import ClassVar

from cutlass_ext.config import NameGrammar, Number, VariantFields


@dataclass(frozen=True)
class ToyConfig(VariantFields):
    factor: int = 2
    family: str = "toy"

    NAME: ClassVar[NameGrammar] = NameGrammar("toy_f", Number("factor"))
    EXAMPLE_NAME: ClassVar[str] = "toy_f2"
