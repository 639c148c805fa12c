"""servebuild.lock."""
