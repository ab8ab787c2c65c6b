"""GPU placement solver: which models go on which cards (pure Python, no Django)."""

from console.placement.schema import FieldError, PlacementInputError, validate_problem
from console.placement.solver import solve

__all__ = ["FieldError", "PlacementInputError", "solve", "validate_problem"]
