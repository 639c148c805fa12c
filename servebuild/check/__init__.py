"""servebuild.check."""
