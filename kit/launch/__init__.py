"""Programs that run inside the image (stdlib and the image's own packages only), shipped as rendered files."""
