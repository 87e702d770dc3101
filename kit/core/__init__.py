"""Shared foundations every stage uses: errors, data files, versions, reading user files safely, safe values,
secrets, atomic writes and the Docker engine. Imports nothing from the stages."""
