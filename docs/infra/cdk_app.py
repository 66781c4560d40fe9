"""An idempotent function, its idempotency table and the policy it needs (CDK v2, Python)."""

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct


class OrdersStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        table = dynamodb.Table(
            self,
            "IdempotencyTable",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute="expiration",
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        function = lambda_.Function(
            self,
            "OrderFunction",
            runtime=lambda_.Runtime.PYTHON_3_11,
            handler="app.handler",
            code=lambda_.Code.from_asset("build/order_function"),  # app.py + the package
            timeout=cdk.Duration.seconds(30),  # also the longest a crashed call holds its key
            environment={"IDEMPOTENCY_TABLE": table.table_name},
        )
        function.add_to_role_policy(
            iam.PolicyStatement(
                sid="IdempotencyRecords",
                actions=[
                    "dynamodb:PutItem",
                    "dynamodb:GetItem",
                    "dynamodb:BatchWriteItem",
                    "dynamodb:BatchGetItem",
                ],
                resources=[table.table_arn],
            )
        )


app = cdk.App()
OrdersStack(app, "OrdersStack")
app.synth()
