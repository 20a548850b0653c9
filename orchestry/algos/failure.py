"""The one error training raises for a run that cannot go on: its own module, so a stage that only
catches it (launch, smoke) does not import the update."""


class TrainingFailed(RuntimeError):
    """The loss went non-finite, training made no progress it should have, or cannot start as set up."""
