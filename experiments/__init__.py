"""One-off studies: each asks one question of the GPU; experiments/README.md lists them with their answers."""


def script_cases(parser, text: str, scripts, least: int = 1) -> list[tuple[str, str, int]]:
    """``--cases`` as comma-separated ``script-dtype-n`` (a script of ``scripts``, float32 or
    float64, n at least ``least``), or the parser's usage error naming the case."""
    cases = []
    for case in text.split(","):
        script, _, rest = case.partition("-")
        dtype, _, n = rest.partition("-")
        if script not in scripts or dtype not in ("float32", "float64") or not n.isdigit() or int(n) < least:
            parser.error(f"--cases {case!r}: pass script-dtype-n of {', '.join(scripts)} (n at least {least}),"
                         f" e.g. {scripts[0]}-float32-1024")
        cases.append((script, dtype, int(n)))
    return cases
