"""`kit image-diff A B`: compare two images file by file (path, type, mode, owner, sha256; no timestamps)."""

from __future__ import annotations

import click

from kit.cli.common import emit_json, standard_options, status


@click.command("image-diff")
@click.argument("image_a")
@click.argument("image_b")
@click.option("--limit", default=40, show_default=True, help="Differences listed per kind.")
@standard_options
@click.pass_context
def image_diff(ctx: click.Context, image_a: str, image_b: str, limit: int, as_json: bool) -> None:
    """Compare two images' content; exit 0 when the same, 1 when they differ (like diff)."""
    from kit.image.imagediff import diff_images

    result = diff_images(image_a, image_b, progress=status)
    if as_json:  # like diff's exit status, ok means "the same"; differing images are data, not problems
        emit_json(result.to_json(), ok=result.same_content)
    else:
        from kit.cli.output import key_values, table

        same_layers = sum(result.same_layers)
        total = len(result.only_a) + len(result.only_b) + len(result.changed) + len(result.config)
        key_values([
            ("ids", f"{result.a['id'][:19]} vs {result.b['id'][:19]}: {'same' if result.same_id else 'different'}"),
            ("layers", f"{same_layers} of {len(result.a['layers'])} the same (diff_ids, which include mtimes)"),
            ("files", f"{result.files_a} vs {result.files_b}"),
            ("content", "the same (every file's path, mode, owner and sha256)" if result.same_content
             else f"{total} difference(s)"),
        ])
        rows = [("config", key, f"{x!r} vs {y!r}") for key, (x, y) in sorted(result.config.items())]
        for label, paths in (("only A", result.only_a), ("only B", result.only_b)):
            rows += [(label, f"/{path}", "") for path in paths[:limit]]
        rows += [("changed", f"/{path}", ", ".join(fields)) for path, fields in list(result.changed.items())[:limit]]
        if rows:
            table(("difference", "where", "what"), rows)
    ctx.exit(0 if result.same_content else 1)
