"""Running programs: the PyCUDA binding, arrays, prepared calls, timing, the plan text."""
