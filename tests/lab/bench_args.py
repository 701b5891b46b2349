"""Command-line types the lab benchmarks share (standard library only: `--help` works without the venv)."""
import argparse


def csv_of(choices):
    """An argparse type: a comma-separated list of CHOICES, at least one, in the order given."""
    def parse(text):
        names = [n.strip() for n in text.split(",") if n.strip()]
        wrong = [n for n in names if n not in choices]
        if wrong or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of {', '.join(choices)}")
        return names
    return parse
