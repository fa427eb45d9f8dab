"""Tools of the repository (not shipped): the production cluster launcher and the capture
of saved histories."""
