"""Grammar-constrained decoding: what a turn may write (``spec``), as a grammar (``lark``), compiled (``guide``).

    c = constraint_for(cfg.tool_format, cfg.reasoning, tools, params)   # the decoder, per turn
    GenerateRequest(..., constraint=c)                                  # every engine honours it
"""

from workers.decode.constraints.spec import (Calls, Constraint, ConstraintError, ToolSpec, constraint_for,
                                             turn_constraint)

__all__ = ["Calls", "Constraint", "ConstraintError", "ToolSpec", "constraint_for", "turn_constraint"]
