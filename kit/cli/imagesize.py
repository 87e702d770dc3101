"""`kit image-size IMAGE`: an image's bytes by layer, by Python distribution and by top-level directory."""

from __future__ import annotations

import click

from kit.cli.common import count_option_type, emit_json, standard_options, status


@click.command("image-size")
@click.argument("image")
@click.option("--limit", type=count_option_type(), default=15, show_default=True,
              help="Rows listed per table (--json lists all).")
@standard_options
def image_size(image: str, limit: int, as_json: bool) -> None:
    """Size an image by layer, Python distribution and directory."""
    from kit.image.imagesize import format_breakdown, image_sizes

    result = image_sizes(image, progress=status)
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(format_breakdown(result, limit))
