"""servebuild.release."""
