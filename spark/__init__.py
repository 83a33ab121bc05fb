"""Spark jobs: the streaming DLS mapping and batch jobs."""
