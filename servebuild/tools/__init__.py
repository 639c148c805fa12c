"""Scripts that run inside images (standard library only, never imported by servebuild): their bytes are
copied into build contexts and their sha256 is in every manifest."""
