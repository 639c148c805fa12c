"""servebuild.render."""
