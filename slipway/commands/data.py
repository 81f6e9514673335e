"""`slipway data`: fetch a sample data set and print its path."""

from __future__ import annotations

import argparse


def add_parser(commands) -> None:
    parser = commands.add_parser("data", help="fetch the sample data and print its path")
    parser.add_argument("name", choices=["taxi", "digits", "diabetes"],
                        help="taxi (classification CSV), digits (image folders) or diabetes (regression CSV)")


def command(args: argparse.Namespace) -> int:
    from slipway.data import diabetes, digits, taxi

    samples = {"taxi": taxi.taxi_csv, "digits": digits.digits_folder, "diabetes": diabetes.diabetes_csv}
    print(samples[args.name]())
    return 0
