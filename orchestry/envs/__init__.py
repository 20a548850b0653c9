"""What the team works on: the environment contract (base.py) and one folder per environment."""
