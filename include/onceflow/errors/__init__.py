"""Named error conditions. Each carries the coordinates an operator needs to act on it.

The errors are grouped by the phase that raises them: base (OnceflowError, ConfigError),
transform (the user's transform and its output), ledger (a txid the ledger refuses), plan
(the broker's log and offsets), process (attempts, their fencing and stage; ProcessExit),
commit (its order and conflicts), formats (the schema registry), sinks (a sink outside the database) and cli (the command
line's refusals). Everything is importable from onceflow.errors.
"""

from onceflow.errors.base import (
    ConfigError,
    OnceflowError,
    PipelineKeyError,
    UnsupportedVersionError,
)
from onceflow.errors.cli import (
    AirflowConflict,
    AirflowError,
    AirflowNotFound,
    AirflowTimeout,
    BackfillArgumentsError,
    BackfillOpenBatchError,
    PartitionCountError,
    PipelineNotChosenError,
    ResetNotConfirmedError,
    RunIdError,
    SeqRangeError,
    UnknownSeqError,
)
from onceflow.errors.commit import (
    CommitConflictError,
    CommitLogAheadError,
    CommitOrderError,
    CommitterFencedError,
    NotStagedError,
    OffsetConflictError,
    SinkContentionError,
    StagedCountsError,
)
from onceflow.errors.formats import (
    IncompatibleSchemaError,
    RegistryUnavailableError,
    SubjectNotFoundError,
)
from onceflow.errors.ledger import (
    AbandonedTxidError,
    IllegalTransitionError,
    InvalidTxidError,
    MigrationError,
    PrunedTxidError,
    UnknownTxidError,
)
from onceflow.errors.plan import (
    DataLossError,
    KafkaAccessError,
    KafkaUnreachableError,
    LogIdentityError,
    OffsetRegressionError,
    PartitionRemovedError,
    PartitionsUnservedError,
    ResetRefusedError,
    TopicMissingError,
    UnprovenLogError,
)
from onceflow.errors.process import (
    FencedAttemptError,
    IncompleteStageError,
    ProcessExit,
    RangeReadError,
    SparkArchiveError,
)
from onceflow.errors.sinks import (
    LakeFileOutsideTableError,
    LakeTableMissingError,
    NotALakeSinkError,
    RerunRefusedError,
    SinkMovedError,
    SinkRejectedError,
    SinkUnavailableError,
)
from onceflow.errors.transform import (
    SinkLayoutError,
    SinkSchemaError,
    StageColumnsError,
    TransformError,
    TransformRaisedError,
    UnrepeatedFailureError,
)

__all__ = [
    "AirflowTimeout",
    "AirflowNotFound",
    "AirflowError",
    "AirflowConflict",
    "StageColumnsError",
    "LakeFileOutsideTableError",
    "SparkArchiveError",
    "RunIdError",
    "AbandonedTxidError",
    "BackfillArgumentsError",
    "BackfillOpenBatchError",
    "CommitConflictError",
    "CommitLogAheadError",
    "CommitOrderError",
    "CommitterFencedError",
    "ConfigError",
    "DataLossError",
    "FencedAttemptError",
    "IllegalTransitionError",
    "InvalidTxidError",
    "IncompatibleSchemaError",
    "IncompleteStageError",
    "KafkaAccessError",
    "KafkaUnreachableError",
    "PartitionsUnservedError",
    "LakeTableMissingError",
    "LogIdentityError",
    "MigrationError",
    "NotALakeSinkError",
    "NotStagedError",
    "OffsetConflictError",
    "OffsetRegressionError",
    "OnceflowError",
    "PartitionCountError",
    "PartitionRemovedError",
    "PipelineKeyError",
    "PipelineNotChosenError",
    "ProcessExit",
    "PrunedTxidError",
    "RangeReadError",
    "RegistryUnavailableError",
    "RerunRefusedError",
    "ResetNotConfirmedError",
    "ResetRefusedError",
    "SeqRangeError",
    "SinkContentionError",
    "SinkMovedError",
    "SinkRejectedError",
    "SinkLayoutError",
    "SinkSchemaError",
    "SinkUnavailableError",
    "SubjectNotFoundError",
    "StagedCountsError",
    "TopicMissingError",
    "TransformError",
    "TransformRaisedError",
    "UnknownSeqError",
    "UnknownTxidError",
    "UnsupportedVersionError",
    "UnprovenLogError",
    "UnrepeatedFailureError",
]

# Each error keeps the name it had when onceflow/errors.py was one module: tracebacks (the
# text Spark hands the driver: onceflow.process.failures, onceflow.poison's marker) and
# pickles name it onceflow.errors.NAME, whichever module of the package defines it.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
