"""deploy/: the ECS files, IAM policies, queues and alarm agree with one another and the code.

The files hold ``${AWS_REGION}``-style placeholders for ``envsubst``; they are
substituted with example values here, then every setting that must agree is
compared: ECS stop timeout > shutdown grace, heartbeat < lease and <
visibility, the task's environment parses as the engine's settings, the
health check is ``engine worker --check``, the task role grants exactly the
AWS actions the code calls, and the queues of the template are the ones
``engine queues create`` makes.
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore import xform_name
from botocore.session import get_session
from moto import mock_aws

from engine.config import Settings
from engine.transports.sqs import SqsSettings
from engine.transports.sqs_queues import create_queues

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ENGINE = ROOT / "engine"
REGION = "eu-west-1"
ACCOUNT = "123456789012"
PLACEHOLDERS = {
    "AWS_REGION": REGION,
    "AWS_ACCOUNT_ID": ACCOUNT,
    "IMAGE_TAG": "1.2.3",
    "PRIVATE_SUBNET_A": "subnet-0aaa",
    "PRIVATE_SUBNET_B": "subnet-0bbb",
    "WORKER_SECURITY_GROUP": "sg-0ccc",
}
# secrets ECS injects from Secrets Manager; example values for parsing the settings
SECRET_EXAMPLES = {
    "ENGINE_DATABASE_URL": "postgresql://erp_worker:pw@db.internal:5432/erp",
    "ENGINE_ALERT_WEBHOOK_URL": "https://hooks.example.invalid/T000/B000",
}
# Functions that only `engine queues create` runs, with the operator's
# credentials: their calls (CreateQueue, SetQueueAttributes) are not the worker's.
ADMIN_ONLY = {"engine/transports/sqs_queues.py": {"create_queues", "_ensure_queue", "_queue_arn"}}
# boto3 operations authorised by another IAM action (AWS: the batch calls of
# SQS need the single call's permission; S3 listing and HEAD need these)
IAM_ACTION = {
    "sqs": {
        "SendMessageBatch": "SendMessage",
        "DeleteMessageBatch": "DeleteMessage",
        "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
    },
    "s3": {"ListObjectsV2": "ListBucket", "HeadObject": "GetObject", "HeadBucket": "ListBucket"},
}
SERVICES = ("sqs", "sns", "s3")


def load(name: str) -> Any:
    text = (DEPLOY / name).read_text()
    for key, value in PLACEHOLDERS.items():
        text = text.replace("${" + key + "}", value)
    left = re.findall(r"\$\{\w+\}", text)
    assert not left, f"{name}: placeholders without an example value here: {left}"
    return json.loads(text)


def container() -> dict[str, Any]:
    (worker,) = load("ecs-task-definition.json")["containerDefinitions"]
    return dict(worker)


def task_env() -> dict[str, str]:
    c = container()
    env = {e["name"]: e["value"] for e in c["environment"]}
    for secret in c["secrets"]:
        env[secret["name"]] = SECRET_EXAMPLES[secret["name"]]
    return env


def task_settings(monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, SqsSettings]:
    for name in list(os.environ):
        if name.startswith("ENGINE_"):
            monkeypatch.delenv(name)
    for name, value in task_env().items():
        monkeypatch.setenv(name, value)
    return Settings(), SqsSettings()


def resources() -> dict[str, Any]:
    return dict(load("worker-resources.json")["Resources"])


def policy_actions(name: str) -> dict[str, set[str]]:
    """service -> the actions a policy file allows."""
    found: dict[str, set[str]] = defaultdict(set)
    for statement in load(name)["Statement"]:
        assert statement["Effect"] == "Allow"
        for action in statement["Action"]:
            service, _, op = action.partition(":")
            assert "*" not in op, f"{name}: wildcard action {action}"
            found[service].add(op)
    return found


def policy_resources(name: str, service: str) -> set[str]:
    return {
        r
        for s in load(name)["Statement"]
        if any(a.startswith(service + ":") for a in s["Action"])
        for r in s["Resource"]
    }


# -- the code's AWS calls --------------------------------------------------------------


def operations(service: str) -> dict[str, str]:
    """boto3 method name -> API operation name, from botocore's bundled model (offline)."""
    model = get_session().get_service_model(service)
    return {xform_name(op): op for op in model.operation_names}


def code_calls() -> tuple[dict[str, set[str]], set[str]]:
    """service -> IAM actions of every boto3 client call in engine/; and the services with a client.

    A module that creates a client of a service (``.client("sqs", ...)``),
    or imports from one that does, has each call of one of that service's
    operations counted, except in the admin-only functions.
    """
    actions: dict[str, set[str]] = defaultdict(set)
    with_client: set[str] = set()
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(ENGINE.rglob("*.py"))}
    creates: dict[str, set[str]] = {}  # module -> the services it creates a client of
    for path, tree in trees.items():
        services = {
            node.args[0].value
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "client"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in SERVICES
        }
        if services:
            creates[".".join(path.relative_to(ROOT).with_suffix("").parts)] = services
        with_client |= services
    for path, tree in trees.items():
        # a module that creates a client, or imports from one that does (the
        # SQS transport's modules share one client factory), makes its calls
        services = set(creates.get(".".join(path.relative_to(ROOT).with_suffix("").parts), ()))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in creates:
                services |= creates[node.module]
        skip = ADMIN_ONLY.get(path.relative_to(ROOT).as_posix(), set())
        for service in services:
            ops = operations(service)
            for node in _calls_outside(tree, skip):
                if isinstance(node.func, ast.Attribute) and node.func.attr in ops:
                    op = ops[node.func.attr]
                    actions[service].add(IAM_ACTION.get(service, {}).get(op, op))
    return actions, with_client


def _calls_outside(tree: ast.AST, functions: set[str]) -> list[ast.Call]:
    found: list[ast.Call] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in functions:
            return
        if isinstance(node, ast.Call):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


# -- the tests -------------------------------------------------------------------------


def test_deploy__stop_timeout_outlasts_shutdown_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    settings, _ = task_settings(monkeypatch)
    stop_timeout = container()["stopTimeout"]
    assert stop_timeout <= 120  # Fargate's maximum
    # SIGTERM, then the grace for running steps, then releasing the rest, before SIGKILL
    assert stop_timeout > settings.shutdown_grace_s + 10


def test_deploy__task_environment_parses_as_engine_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings, sqs = task_settings(monkeypatch)
    env = task_env()
    assert settings.transport == "sqs"
    assert settings.log_format == "json"
    assert settings.metrics_port is not None
    assert sqs.queue_url == env["ENGINE_SQS_QUEUE_URL"]
    assert sqs.resolved_region() == REGION
    for sink in settings.alert_sinks:  # what `engine worker --check` asks of each sink
        assert sink == "log" or {"sns": settings.alert_sns_topic_arn, "webhook": True}[sink]
    unknown = {n for n in env if n.removeprefix("ENGINE_").lower() not in _setting_names()}
    assert not unknown, f"task environment names settings the engine does not have: {unknown}"


def _setting_names() -> set[str]:
    return set(Settings.model_fields) | {f"sqs_{n}" for n in SqsSettings.model_fields}


def test_deploy__heartbeat_shorter_than_lease_and_visibility(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings, _ = task_settings(monkeypatch)
    queue_visibility = resources()["StepQueue"]["Properties"]["VisibilityTimeout"]
    assert settings.heartbeat_s < settings.lease_s
    assert settings.heartbeat_s < settings.visibility_s
    assert settings.heartbeat_s < queue_visibility
    assert queue_visibility == settings.visibility_s


def test_deploy__secrets_not_in_plain_environment() -> None:
    c = container()
    plain = {e["name"] for e in c["environment"]}
    assert {"ENGINE_DATABASE_URL", "ENGINE_ALERT_WEBHOOK_URL"} <= {s["name"] for s in c["secrets"]}
    assert not plain & set(SECRET_EXAMPLES)
    allowed = policy_resources("iam-execution-policy.json", "secretsmanager")
    for secret in c["secrets"]:
        assert f"{secret['valueFrom']}-*" in allowed  # the ARN's random suffix


def test_deploy__health_check_is_engine_worker_check() -> None:
    c = container()
    assert c["healthCheck"]["command"] == ["CMD", "engine", "worker", "--check"]
    assert c["healthCheck"]["timeout"] < c["healthCheck"]["interval"]
    assert c["command"] == ["worker"]


def test_deploy__metrics_port_is_mapped(monkeypatch: pytest.MonkeyPatch) -> None:
    settings, _ = task_settings(monkeypatch)
    ports = {p["containerPort"] for p in container()["portMappings"]}
    assert settings.metrics_port in ports
    # the default, 127.0.0.1, is unreachable from outside the container
    assert settings.metrics_host == "0.0.0.0"


def test_deploy__logs_go_to_the_template_log_group() -> None:
    options = container()["logConfiguration"]["options"]
    assert container()["logConfiguration"]["logDriver"] == "awslogs"
    group = resources()["WorkerLogGroup"]["Properties"]["LogGroupName"]
    assert options["awslogs-group"] == group
    assert options["awslogs-region"] == REGION
    assert policy_actions("iam-execution-policy.json")["logs"] == {
        "CreateLogStream",
        "PutLogEvents",
    }
    arn = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{group}:*"
    assert policy_resources("iam-execution-policy.json", "logs") == {arn}


@pytest.mark.parametrize("service", SERVICES)
def test_deploy__task_role_allows_exactly_the_calls_the_code_makes(service: str) -> None:
    granted = policy_actions("iam-worker-policy.json")
    assert set(granted) <= set(SERVICES), "the task role is for the worker's own AWS calls"
    called, with_client = code_calls()
    assert service in with_client, (
        f"the task role grants {sorted(granted[service])} but no boto3 {service} client is "
        "created anywhere in engine/: drop the grant, or find where the code calls it"
    )
    assert granted[service] == called[service], (
        f"{service}: granted but never called: {sorted(granted[service] - called[service])}; "
        f"called but not granted: {sorted(called[service] - granted[service])}"
    )


def test_deploy__task_role_resources_are_the_configured_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings, sqs = task_settings(monkeypatch)
    queue = resources()["StepQueue"]["Properties"]["QueueName"]
    dlq = resources()["StepDeadLetterQueue"]["Properties"]["QueueName"]
    assert sqs.queue_url is not None and sqs.queue_url.endswith(f"/{ACCOUNT}/{queue}")
    assert sqs.dlq_url is not None and sqs.dlq_url.endswith(f"/{ACCOUNT}/{dlq}")
    assert policy_resources("iam-worker-policy.json", "sqs") == {
        f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue}",
        f"arn:aws:sqs:{REGION}:{ACCOUNT}:{dlq}",
    }
    topic = resources()["AlertTopic"]["Properties"]["TopicName"]
    assert settings.alert_sns_topic_arn == f"arn:aws:sns:{REGION}:{ACCOUNT}:{topic}"
    assert policy_resources("iam-worker-policy.json", "sns") == {settings.alert_sns_topic_arn}
    assert settings.reports_url is not None
    bucket_prefix = settings.reports_url.removeprefix("s3://").rstrip("/")
    assert policy_resources("iam-worker-policy.json", "s3") == {f"arn:aws:s3:::{bucket_prefix}/*"}


def test_deploy__redrive_and_alarm_on_the_dead_letter_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, sqs = task_settings(monkeypatch)
    r = resources()
    redrive = r["StepQueue"]["Properties"]["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": ["StepDeadLetterQueue", "Arn"]}
    assert redrive["maxReceiveCount"] == sqs.max_receive_count
    alarm = r["DeadLetterAlarm"]["Properties"]
    assert (alarm["Namespace"], alarm["MetricName"]) == (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
    )
    assert alarm["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": ["StepDeadLetterQueue", "QueueName"]}}
    ]
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)
    assert alarm["AlarmActions"] == [{"Ref": "AlertTopic"}]


def test_deploy__engine_queues_create_makes_the_template_queues(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings, sqs = task_settings(monkeypatch)
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    r = resources()
    with mock_aws():
        client = boto3.client("sqs", region_name=REGION)
        made = create_queues(sqs, visibility_s=settings.visibility_s, client=client)
        attributes = client.get_queue_attributes(QueueUrl=made.url, AttributeNames=["All"])
        dlq = client.get_queue_attributes(QueueUrl=made.dlq_url, AttributeNames=["All"])
    queue, dead = r["StepQueue"]["Properties"], r["StepDeadLetterQueue"]["Properties"]
    assert (made.name, made.dlq_name) == (queue["QueueName"], dead["QueueName"])
    assert int(attributes["Attributes"]["VisibilityTimeout"]) == queue["VisibilityTimeout"]
    redrive = json.loads(attributes["Attributes"]["RedrivePolicy"])
    assert int(redrive["maxReceiveCount"]) == queue["RedrivePolicy"]["maxReceiveCount"]
    assert int(dlq["Attributes"]["MessageRetentionPeriod"]) == dead["MessageRetentionPeriod"]


def test_deploy__service_runs_the_task_family() -> None:
    service = load("ecs-service.json")
    assert service["taskDefinition"] == load("ecs-task-definition.json")["family"]
    assert service["deploymentConfiguration"]["deploymentCircuitBreaker"]["enable"] is True
    assert "loadBalancers" not in service  # workers serve nothing but their metrics
