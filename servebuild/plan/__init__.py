"""servebuild.plan."""
