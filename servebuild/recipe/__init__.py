"""servebuild.recipe."""
