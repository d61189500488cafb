"""The JetStream API error table: the reference's ``server/errors.json`` as data.

Each entry keeps the reference's constant name (``JSStreamNotFoundErr``), the HTTP-like ``code``,
the JetStream ``err_code`` and the ``description``; clients match on ``err_code`` (nats-py maps
10059 to ``NotFoundError``...), so these values are wire contract, not prose. Descriptions may hold
``{placeholders}`` (``{err}``, ``{seq}``, ``{subject}``...) that ``ApiError(spec, **params)`` fills in
the way the reference does: each given ``{key}`` is replaced by ``str(value)``, unknown ones stay.

Generated once from nats-server ``server/errors.json`` (templates, removed from the server, left out).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from core.errors import LeafjetError


@dataclass(frozen=True, slots=True)
class ApiErrorSpec:
    name: str
    code: int
    err_code: int
    description: str


def _s(name: str, code: int, err_code: int, description: str) -> ApiErrorSpec:
    return ApiErrorSpec(name, code, err_code, description)


_SPECS: tuple[ApiErrorSpec, ...] = (
    _s("JSAccountResourcesExceededErr", 400, 10002, "resource limits exceeded for account"),
    _s("JSBadRequestErr", 400, 10003, "bad request"),
    _s("JSClusterIncompleteErr", 503, 10004, "incomplete results"),
    _s("JSClusterNoPeersErrF", 400, 10005, "{err}"),
    _s("JSClusterNotActiveErr", 500, 10006, "JetStream not in clustered mode"),
    _s("JSClusterNotAssignedErr", 500, 10007, "JetStream cluster not assigned to this server"),
    _s("JSClusterNotAvailErr", 503, 10008, "JetStream system temporarily unavailable"),
    _s("JSClusterNotLeaderErr", 500, 10009, "JetStream cluster can not handle request"),
    _s("JSClusterRequiredErr", 503, 10010, "JetStream clustering support required"),
    _s("JSClusterTagsErr", 400, 10011, "tags placement not supported for operation"),
    _s("JSConsumerCreateErrF", 500, 10012, "{err}"),
    _s("JSConsumerNameExistErr", 400, 10013, "consumer name already in use"),
    _s("JSConsumerNotFoundErr", 404, 10014, "consumer not found"),
    _s("JSSnapshotDeliverSubjectInvalidErr", 400, 10015, "deliver subject not valid"),
    _s(
        "JSConsumerDurableNameNotInSubjectErr",
        400,
        10016,
        "consumer expected to be durable but no durable name set in subject",
    ),
    _s(
        "JSConsumerDurableNameNotMatchSubjectErr",
        400,
        10017,
        "consumer name in subject does not match durable name in request",
    ),
    _s(
        "JSConsumerDurableNameNotSetErr",
        400,
        10018,
        "consumer expected to be durable but a durable name was not set",
    ),
    _s(
        "JSConsumerEphemeralWithDurableInSubjectErr",
        400,
        10019,
        "consumer expected to be ephemeral but detected a durable name set in subject",
    ),
    _s(
        "JSConsumerEphemeralWithDurableNameErr",
        400,
        10020,
        "consumer expected to be ephemeral but a durable name was set in request",
    ),
    _s(
        "JSStreamExternalApiOverlapErrF",
        400,
        10021,
        "stream external api prefix {prefix} must not overlap with {subject}",
    ),
    _s(
        "JSStreamExternalDelPrefixOverlapsErrF",
        400,
        10022,
        "stream external delivery prefix {prefix} overlaps with stream subject {subject}",
    ),
    _s("JSInsufficientResourcesErr", 503, 10023, "insufficient resources"),
    _s(
        "JSStreamInvalidExternalDeliverySubjErrF",
        400,
        10024,
        "stream external delivery prefix {prefix} must not contain wildcards",
    ),
    _s("JSInvalidJSONErr", 400, 10025, "invalid JSON: {err}"),
    _s("JSMaximumConsumersLimitErr", 400, 10026, "maximum consumers limit reached"),
    _s("JSMaximumStreamsLimitErr", 400, 10027, "maximum number of streams reached"),
    _s("JSMemoryResourcesExceededErr", 500, 10028, "insufficient memory resources available"),
    _s("JSMirrorConsumerSetupFailedErrF", 500, 10029, "{err}"),
    _s("JSMirrorMaxMessageSizeTooBigErr", 400, 10030, "stream mirror must have max message size >= source"),
    _s("JSMirrorWithSourcesErr", 400, 10031, "stream mirrors can not also contain other sources"),
    _s(
        "JSMirrorWithStartSeqAndTimeErr",
        400,
        10032,
        "stream mirrors can not have both start seq and start time configured",
    ),
    _s("JSMirrorWithSubjectFiltersErr", 400, 10033, "stream mirrors can not contain filtered subjects"),
    _s("JSMirrorWithSubjectsErr", 400, 10034, "stream mirrors can not contain subjects"),
    _s("JSNoAccountErr", 503, 10035, "account not found"),
    _s("JSClusterUnSupportFeatureErr", 503, 10036, "not currently supported in clustered mode"),
    _s("JSNoMessageFoundErr", 404, 10037, "no message found"),
    _s("JSNotEmptyRequestErr", 400, 10038, "expected an empty request payload"),
    _s("JSNotEnabledForAccountErr", 503, 10039, "JetStream not enabled for account"),
    _s("JSClusterPeerNotMemberErr", 400, 10040, "peer not a member"),
    _s("JSRaftGeneralErrF", 500, 10041, "{err}"),
    _s(
        "JSRestoreSubscribeFailedErrF",
        500,
        10042,
        "JetStream unable to subscribe to restore snapshot {subject}: {err}",
    ),
    _s("JSSequenceNotFoundErrF", 400, 10043, "sequence {seq} not found"),
    _s("JSClusterServerNotMemberErr", 400, 10044, "server is not a member of the cluster"),
    _s("JSSourceConsumerSetupFailedErrF", 500, 10045, "{err}"),
    _s("JSSourceMaxMessageSizeTooBigErr", 400, 10046, "stream source must have max message size >= target"),
    _s("JSStorageResourcesExceededErr", 500, 10047, "insufficient storage resources available"),
    _s("JSStreamAssignmentErrF", 500, 10048, "{err}"),
    _s("JSStreamCreateErrF", 500, 10049, "{err}"),
    _s("JSStreamDeleteErrF", 500, 10050, "{err}"),
    _s("JSStreamGeneralErrorF", 500, 10051, "{err}"),
    _s("JSStreamInvalidConfigF", 500, 10052, "{err}"),
    _s("JSStreamLimitsErrF", 500, 10053, "{err}"),
    _s("JSStreamMessageExceedsMaximumErr", 400, 10054, "message size exceeds maximum allowed"),
    _s("JSStreamMirrorNotUpdatableErr", 400, 10055, "stream mirror configuration can not be updated"),
    _s("JSStreamMismatchErr", 400, 10056, "stream name in subject does not match request"),
    _s("JSStreamMsgDeleteFailedF", 500, 10057, "{err}"),
    _s("JSStreamNameExistErr", 400, 10058, "stream name already in use with a different configuration"),
    _s("JSStreamNotFoundErr", 404, 10059, "stream not found"),
    _s("JSStreamNotMatchErr", 400, 10060, "expected stream does not match"),
    _s("JSStreamReplicasNotUpdatableErr", 400, 10061, "Replicas configuration can not be updated"),
    _s("JSStreamRestoreErrF", 500, 10062, "restore failed: {err}"),
    _s("JSStreamSequenceNotMatchErr", 503, 10063, "expected stream sequence does not match"),
    _s("JSStreamSnapshotErrF", 500, 10064, "snapshot failed: {err}"),
    _s("JSStreamSubjectOverlapErr", 400, 10065, "subjects overlap with an existing stream"),
    _s("JSStreamUpdateErrF", 500, 10069, "{err}"),
    _s("JSStreamWrongLastMsgIDErrF", 400, 10070, "wrong last msg ID: {id}"),
    _s("JSStreamWrongLastSequenceErrF", 400, 10071, "wrong last sequence: {seq}"),
    _s("JSTempStorageFailedErr", 500, 10072, "JetStream unable to open temp storage for restore"),
    _s("JSStreamReplicasNotSupportedErr", 500, 10074, "replicas > 1 not supported in non-clustered mode"),
    _s("JSPeerRemapErr", 503, 10075, "peer remap failed"),
    _s("JSNotEnabledErr", 503, 10076, "JetStream not enabled"),
    _s("JSStreamStoreFailedF", 503, 10077, "{err}"),
    _s("JSConsumerConfigRequiredErr", 400, 10078, "consumer config required"),
    _s("JSConsumerDeliverToWildcardsErr", 400, 10079, "consumer deliver subject has wildcards"),
    _s("JSConsumerPushMaxWaitingErr", 400, 10080, "consumer in push mode can not set max waiting"),
    _s("JSConsumerDeliverCycleErr", 400, 10081, "consumer deliver subject forms a cycle"),
    _s(
        "JSConsumerMaxPendingAckPolicyRequiredErr",
        400,
        10082,
        "consumer requires ack policy for max ack pending",
    ),
    _s("JSConsumerSmallHeartbeatErr", 400, 10083, "consumer idle heartbeat needs to be >= 100ms"),
    _s(
        "JSConsumerPullRequiresAckErr",
        400,
        10084,
        "consumer in pull mode requires explicit ack policy on workqueue stream",
    ),
    _s("JSConsumerPullNotDurableErr", 400, 10085, "consumer in pull mode requires a durable name"),
    _s("JSConsumerPullWithRateLimitErr", 400, 10086, "consumer in pull mode can not have rate limit set"),
    _s("JSConsumerMaxWaitingNegativeErr", 400, 10087, "consumer max waiting needs to be positive"),
    _s("JSConsumerHBRequiresPushErr", 400, 10088, "consumer idle heartbeat requires a push based consumer"),
    _s("JSConsumerFCRequiresPushErr", 400, 10089, "consumer flow control requires a push based consumer"),
    _s("JSConsumerDirectRequiresPushErr", 400, 10090, "consumer direct requires a push based consumer"),
    _s("JSConsumerDirectRequiresEphemeralErr", 400, 10091, "consumer direct requires an ephemeral consumer"),
    _s("JSConsumerOnMappedErr", 400, 10092, "consumer direct on a mapped consumer"),
    _s(
        "JSConsumerFilterNotSubsetErr",
        400,
        10093,
        "consumer filter subject is not a valid subset of the interest subjects",
    ),
    _s("JSConsumerInvalidPolicyErrF", 400, 10094, "{err}"),
    _s("JSConsumerInvalidSamplingErrF", 400, 10095, "failed to parse consumer sampling configuration: {err}"),
    _s("JSStreamInvalidErr", 500, 10096, "stream not valid"),
    _s("JSStreamHeaderExceedsMaximumErr", 400, 10097, "header size exceeds maximum allowed of 64k"),
    _s("JSConsumerWQRequiresExplicitAckErr", 400, 10098, "workqueue stream requires explicit ack"),
    _s(
        "JSConsumerWQMultipleUnfilteredErr",
        400,
        10099,
        "multiple non-filtered consumers not allowed on workqueue stream",
    ),
    _s("JSConsumerWQConsumerNotUniqueErr", 400, 10100, "filtered consumer not unique on workqueue stream"),
    _s(
        "JSConsumerWQConsumerNotDeliverAllErr", 400, 10101, "consumer must be deliver all on workqueue stream"
    ),
    _s("JSConsumerNameTooLongErrF", 400, 10102, "consumer name is too long, maximum allowed is {max}"),
    _s("JSConsumerBadDurableNameErr", 400, 10103, "durable name can not contain '.', '*', '>'"),
    _s("JSConsumerStoreFailedErrF", 500, 10104, "error creating store for consumer: {err}"),
    _s("JSConsumerExistingActiveErr", 400, 10105, "consumer already exists and is still active"),
    _s(
        "JSConsumerReplacementWithDifferentNameErr",
        400,
        10106,
        "consumer replacement durable config not the same",
    ),
    _s(
        "JSConsumerDescriptionTooLongErrF",
        400,
        10107,
        "consumer description is too long, maximum allowed is {max}",
    ),
    _s(
        "JSConsumerWithFlowControlNeedsHeartbeats",
        400,
        10108,
        "consumer with flow control also needs heartbeats",
    ),
    _s("JSStreamSealedErr", 400, 10109, "invalid operation on sealed stream"),
    _s("JSStreamPurgeFailedF", 500, 10110, "{err}"),
    _s("JSStreamRollupFailedF", 500, 10111, "{err}"),
    _s("JSConsumerInvalidDeliverSubject", 400, 10112, "invalid push consumer deliver subject"),
    _s("JSStreamMaxBytesRequired", 400, 10113, "account requires a stream config to have max bytes set"),
    _s("JSConsumerMaxRequestBatchNegativeErr", 400, 10114, "consumer max request batch needs to be > 0"),
    _s("JSConsumerMaxRequestExpiresTooSmall", 400, 10115, "consumer max request expires needs to be >= 1ms"),
    _s(
        "JSConsumerMaxDeliverBackoffErr",
        400,
        10116,
        "max deliver is required to be > length of backoff values",
    ),
    _s("JSStreamInfoMaxSubjectsErr", 500, 10117, "subject details would exceed maximum allowed"),
    _s("JSStreamOfflineErr", 500, 10118, "stream is offline"),
    _s("JSConsumerOfflineErr", 500, 10119, "consumer is offline"),
    _s("JSNoLimitsErr", 400, 10120, "no JetStream default or applicable tiered limit present"),
    _s(
        "JSConsumerMaxPendingAckExcessErrF",
        400,
        10121,
        "consumer max ack pending exceeds system limit of {limit}",
    ),
    _s(
        "JSStreamMaxStreamBytesExceeded",
        400,
        10122,
        "stream max bytes exceeds account limit max stream bytes",
    ),
    _s("JSStreamMoveAndScaleErr", 400, 10123, "can not move and scale a stream in a single update"),
    _s("JSStreamMoveInProgressErr", 400, 10124, "stream move already in progress"),
    _s(
        "JSConsumerMaxRequestBatchExceededF",
        400,
        10125,
        "consumer max request batch exceeds server limit of {limit}",
    ),
    _s("JSConsumerReplicasExceedsStream", 400, 10126, "consumer config replica count exceeds parent stream"),
    _s(
        "JSConsumerNameContainsPathSeparatorsErr", 400, 10127, "Consumer name can not contain path separators"
    ),
    _s("JSStreamNameContainsPathSeparatorsErr", 400, 10128, "Stream name can not contain path separators"),
    _s("JSStreamReconfigureNotInProgressErr", 400, 10129, "stream reconfiguration not in progress"),
    _s("JSStreamNameExistRestoreFailedErr", 400, 10130, "stream name already in use, cannot restore"),
    _s(
        "JSConsumerCreateFilterSubjectMismatchErr",
        400,
        10131,
        "Consumer create request did not match filtered subject from create subject",
    ),
    _s(
        "JSConsumerCreateDurableAndNameMismatch",
        400,
        10132,
        "Consumer Durable and Name have to be equal if both are provided",
    ),
    _s("JSReplicasCountCannotBeNegative", 400, 10133, "replicas count cannot be negative"),
    _s(
        "JSConsumerReplicasShouldMatchStream",
        400,
        10134,
        "consumer config replicas must match interest retention stream's replicas",
    ),
    _s("JSConsumerMetadataLengthErrF", 400, 10135, "consumer metadata exceeds maximum size of {limit}"),
    _s(
        "JSConsumerDuplicateFilterSubjects",
        400,
        10136,
        "consumer cannot have both FilterSubject and FilterSubjects specified",
    ),
    _s(
        "JSConsumerMultipleFiltersNotAllowed",
        400,
        10137,
        "consumer with multiple subject filters cannot use subject based API",
    ),
    _s("JSConsumerOverlappingSubjectFilters", 400, 10138, "consumer subject filters cannot overlap"),
    _s("JSConsumerEmptyFilter", 400, 10139, "consumer filter in FilterSubjects cannot be empty"),
    _s("JSSourceDuplicateDetected", 400, 10140, "duplicate source configuration detected"),
    _s("JSSourceInvalidStreamName", 400, 10141, "sourced stream name is invalid"),
    _s("JSMirrorInvalidStreamName", 400, 10142, "mirrored stream name is invalid"),
    _s("JSMirrorWithFirstSeqErr", 400, 10143, "stream mirrors can not have first sequence configured"),
    _s(
        "JSSourceMultipleFiltersNotAllowed",
        400,
        10144,
        "source with multiple subject transforms cannot also have a single subject filter",
    ),
    _s("JSSourceInvalidSubjectFilter", 400, 10145, "source transform source: {err}"),
    _s("JSSourceInvalidTransformDestination", 400, 10146, "source transform: {err}"),
    _s("JSSourceOverlappingSubjectFilters", 400, 10147, "source filters can not overlap"),
    _s("JSConsumerAlreadyExists", 400, 10148, "consumer already exists"),
    _s("JSConsumerDoesNotExist", 400, 10149, "consumer does not exist"),
    _s(
        "JSMirrorMultipleFiltersNotAllowed",
        400,
        10150,
        "mirror with multiple subject transforms cannot also have a single subject filter",
    ),
    _s("JSMirrorInvalidSubjectFilter", 400, 10151, "mirror transform source: {err}"),
    _s("JSMirrorOverlappingSubjectFilters", 400, 10152, "mirror subject filters can not overlap"),
    _s(
        "JSConsumerInactiveThresholdExcess",
        400,
        10153,
        "consumer inactive threshold exceeds system limit of {limit}",
    ),
    _s("JSMirrorInvalidTransformDestination", 400, 10154, "mirror transform: {err}"),
    _s("JSStreamTransformInvalidSource", 400, 10155, "stream transform source: {err}"),
    _s("JSStreamTransformInvalidDestination", 400, 10156, "stream transform: {err}"),
    _s("JSPedanticErrF", 400, 10157, "pedantic mode: {err}"),
    _s("JSStreamDuplicateMessageConflict", 409, 10158, "duplicate message id is in process"),
    _s(
        "JSConsumerPriorityPolicyWithoutGroup",
        400,
        10159,
        "Setting PriorityPolicy requires at least one PriorityGroup to be set",
    ),
    _s(
        "JSConsumerInvalidPriorityGroupErr",
        400,
        10160,
        "Provided priority group does not exist for this consumer",
    ),
    _s("JSConsumerEmptyGroupName", 400, 10161, "Group name cannot be an empty string"),
    _s(
        "JSConsumerInvalidGroupNameErr",
        400,
        10162,
        "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters",
    ),
    _s(
        "JSStreamExpectedLastSeqPerSubjectNotReady",
        503,
        10163,
        "expected last sequence per subject temporarily unavailable",
    ),
    _s("JSStreamWrongLastSequenceConstantErr", 400, 10164, "wrong last sequence"),
    _s("JSMessageTTLInvalidErr", 400, 10165, "invalid per-message TTL"),
    _s("JSMessageTTLDisabledErr", 400, 10166, "per-message TTL is disabled"),
    _s("JSStreamTooManyRequests", 429, 10167, "too many requests"),
    _s("JSMessageIncrDisabledErr", 400, 10168, "message counters is disabled"),
    _s("JSMessageIncrMissingErr", 400, 10169, "message counter increment is missing"),
    _s("JSMessageIncrPayloadErr", 400, 10170, "message counter has payload"),
    _s("JSMessageIncrInvalidErr", 400, 10171, "message counter increment is invalid"),
    _s("JSMessageCounterBrokenErr", 400, 10172, "message counter is broken"),
    _s("JSMirrorWithCountersErr", 400, 10173, "stream mirrors can not also calculate counters"),
    _s("JSAtomicPublishDisabledErr", 400, 10174, "atomic publish is disabled"),
    _s("JSAtomicPublishMissingSeqErr", 400, 10175, "atomic publish sequence is missing"),
    _s("JSAtomicPublishIncompleteBatchErr", 400, 10176, "atomic publish batch is incomplete"),
    _s(
        "JSAtomicPublishUnsupportedHeaderBatchErr",
        400,
        10177,
        "atomic publish unsupported header used: {header}",
    ),
    _s(
        "JSConsumerPushWithPriorityGroupErr",
        400,
        10178,
        "priority groups can not be used with push consumers",
    ),
    _s("JSAtomicPublishInvalidBatchIDErr", 400, 10179, "atomic publish batch ID is invalid"),
    _s("JSStreamMinLastSeqErr", 412, 10180, "min last sequence"),
    _s("JSConsumerAckPolicyInvalidErr", 400, 10181, "consumer ack policy invalid"),
    _s("JSConsumerReplayPolicyInvalidErr", 400, 10182, "consumer replay policy invalid"),
    _s("JSConsumerAckWaitNegativeErr", 400, 10183, "consumer ack wait needs to be positive"),
    _s("JSConsumerBackOffNegativeErr", 400, 10184, "consumer backoff needs to be positive"),
    _s("JSRequiredApiLevelErr", 412, 10185, "JetStream minimum api level required"),
    _s("JSMirrorWithMsgSchedulesErr", 400, 10186, "stream mirrors can not also schedule messages"),
    _s("JSSourceWithMsgSchedulesErr", 400, 10187, "stream source can not also schedule messages"),
    _s("JSMessageSchedulesDisabledErr", 400, 10188, "message schedules is disabled"),
    _s("JSMessageSchedulesPatternInvalidErr", 400, 10189, "message schedules pattern is invalid"),
    _s("JSMessageSchedulesTargetInvalidErr", 400, 10190, "message schedules target is invalid"),
    _s("JSMessageSchedulesTTLInvalidErr", 400, 10191, "message schedules invalid per-message TTL"),
    _s("JSMessageSchedulesRollupInvalidErr", 400, 10192, "message schedules invalid rollup"),
    _s(
        "JSStreamExpectedLastSeqPerSubjectInvalid",
        400,
        10193,
        "missing sequence for expected last sequence per subject",
    ),
    _s("JSStreamOfflineReasonErrF", 500, 10194, "stream is offline: {err}"),
    _s("JSConsumerOfflineReasonErrF", 500, 10195, "consumer is offline: {err}"),
    _s(
        "JSConsumerPriorityGroupWithPolicyNone",
        400,
        10196,
        "consumer can not have priority groups when policy is none",
    ),
    _s(
        "JSConsumerPinnedTTLWithoutPriorityPolicyNone",
        400,
        10197,
        "PinnedTTL cannot be set when PriorityPolicy is none",
    ),
    _s("JSMirrorWithAtomicPublishErr", 400, 10198, "stream mirrors can not also use atomic publishing"),
    _s("JSAtomicPublishTooLargeBatchErrF", 400, 10199, "atomic publish batch is too large: {size}"),
    _s("JSAtomicPublishInvalidBatchCommitErr", 400, 10200, "atomic publish batch commit is invalid"),
    _s(
        "JSAtomicPublishContainsDuplicateMessageErr",
        400,
        10201,
        "atomic publish batch contains duplicate message id",
    ),
    _s("JSClusterServerMemberChangeInflightErr", 400, 10202, "cluster member change is in progress"),
    _s("JSMessageSchedulesSourceInvalidErr", 400, 10203, "message schedules source is invalid"),
    _s("JSConsumerInvalidResetErr", 400, 10204, "invalid reset: {err}"),
    _s("JSBatchPublishDisabledErr", 400, 10205, "batch publish is disabled"),
    _s("JSBatchPublishInvalidPatternErr", 400, 10206, "batch publish pattern is invalid"),
    _s("JSBatchPublishInvalidBatchIDErr", 400, 10207, "batch publish ID is invalid"),
    _s("JSBatchPublishUnknownBatchIDErr", 400, 10208, "batch publish ID unknown"),
    _s("JSMirrorWithBatchPublishErr", 400, 10209, "stream mirrors can not also use batch publishing"),
    _s("JSAtomicPublishTooManyInflight", 429, 10210, "atomic publish too many inflight"),
    _s("JSBatchPublishTooManyInflight", 429, 10211, "batch publish too many inflight"),
    _s("JSMessageSchedulesSchedulerInvalidErr", 400, 10212, "message schedules invalid scheduler"),
    _s("JSMirrorDurableConsumerCfgInvalid", 400, 10213, "stream mirror consumer config is invalid"),
    _s(
        "JSMirrorConsumerRequiresAckFCErr",
        400,
        10214,
        "stream mirror consumer requires flow control ack policy",
    ),
    _s("JSSourceDurableConsumerCfgInvalid", 400, 10215, "stream source consumer config is invalid"),
    _s("JSSourceDurableConsumerDuplicateDetected", 400, 10216, "duplicate stream source consumer detected"),
    _s(
        "JSSourceConsumerRequiresAckFCErr",
        400,
        10217,
        "stream source consumer requires flow control ack policy",
    ),
    _s(
        "JSConsumerAckFCRequiresPushErr", 400, 10218, "flow control ack policy requires a push based consumer"
    ),
    _s("JSConsumerAckFCRequiresFCErr", 400, 10219, "flow control ack policy requires flow control"),
    _s(
        "JSConsumerAckFCRequiresMaxAckPendingErr",
        400,
        10220,
        "flow control ack policy requires max ack pending",
    ),
    _s("JSConsumerAckFCRequiresNoAckWaitErr", 400, 10221, "flow control ack policy requires unset ack wait"),
    _s(
        "JSConsumerAckFCRequiresNoMaxDeliverErr",
        400,
        10222,
        "flow control ack policy requires unset max deliver",
    ),
    _s("JSMessageSchedulesTimeZoneInvalidErr", 400, 10223, "message schedules time zone is invalid"),
    _s("JSClusterRescueErr", 400, 10224, "JetStream system rescue not applied: {err}"),
    _s("JSConsumerStreamIdentityMismatchF", 400, 10225, "consumer's stream identity does not match: {msg}"),
    _s("JSStreamReconfigureInProgressErr", 400, 10226, "stream reconfiguration already in progress"),
    _s("JSMessageSourceHdrNotAllowedErr", 400, 10227, "message stream source header is not allowed"),
)

API_ERRORS: Mapping[str, ApiErrorSpec] = MappingProxyType({s.name: s for s in _SPECS})
"""Reference constant name -> spec."""

_BY_ERR_CODE: Mapping[int, ApiErrorSpec] = MappingProxyType({s.err_code: s for s in _SPECS})


def spec(name: str) -> ApiErrorSpec:
    """The spec named ``name``; ``KeyError`` for a name the table does not hold."""
    return API_ERRORS[name]


def spec_by_err_code(err_code: int) -> ApiErrorSpec:
    """The spec with JetStream error code ``err_code``; ``KeyError`` if unknown."""
    return _BY_ERR_CODE[err_code]


def _render(description: str, params: Mapping[str, Any]) -> str:
    for key, value in params.items():
        description = description.replace("{" + key + "}", str(value))
    return description


class ApiError(LeafjetError):
    """A JetStream API error, rendered by the API layer as ``{"error": {...}}``.

    ``str(err)`` is ``"<description> (<err_code>)"`` like the reference's ``ApiError.Error()``.
    """

    # Whether the account's API error count takes it: not for the few refusals the reference
    # sends as an ordinary response (a MSG.DELETE the store refuses).
    counts_as_error = True

    def __init__(self, spec: ApiErrorSpec, **params: Any) -> None:
        self.spec = spec
        self.name = spec.name
        self.code = spec.code
        self.err_code = spec.err_code
        self.description = _render(spec.description, params)
        super().__init__(f"{self.description} ({self.err_code})")

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "err_code": self.err_code, "description": self.description}

    def __repr__(self) -> str:
        return f"ApiError({self.name}, {self.description!r})"


def api_error(name: str, **params: Any) -> ApiError:
    """``ApiError`` for the reference constant ``name``; ``KeyError`` for an unknown name."""
    return ApiError(API_ERRORS[name], **params)
