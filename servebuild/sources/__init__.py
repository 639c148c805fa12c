"""servebuild.sources."""
