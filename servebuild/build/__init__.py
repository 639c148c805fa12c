"""servebuild.build."""
