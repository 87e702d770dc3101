"""Stage 4, image: rendered files -> an image, built with the Docker SDK from a host-side wheelhouse, pinned by a
lock file, cut to the floor (prune), measured (size, diff) and pushed."""
