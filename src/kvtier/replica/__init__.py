"""Seeded generators of replica records: files in the formats of records that are not public,
built so that the pipeline reproduces the published numbers. Each output is pinned as `replica`."""
