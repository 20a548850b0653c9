"""How the team learns: the joint-action tree, the MAGRPO math, the policy-gradient update."""
