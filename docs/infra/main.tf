terraform {
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.0" # any 5.x; 6.x is not tested
    }
  }
}

variable "function_role_name" {
  description = "The execution role of the function that uses the table"
  type        = string
}

resource "aws_dynamodb_table" "idempotency" {
  name         = "orders-idempotency"
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "pk"

  attribute {
    name = "pk"
    type = "S"
  }

  ttl {
    attribute_name = "expiration"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }

  deletion_protection_enabled = true
}

data "aws_iam_policy_document" "idempotency" {
  statement {
    sid = "IdempotencyRecords"
    actions = [
      "dynamodb:PutItem",
      "dynamodb:GetItem",
      "dynamodb:BatchWriteItem",
      "dynamodb:BatchGetItem",
    ]
    resources = [aws_dynamodb_table.idempotency.arn]
  }
}

resource "aws_iam_role_policy" "idempotency" {
  name   = "idempotency-records"
  role   = var.function_role_name
  policy = data.aws_iam_policy_document.idempotency.json
}

# The function's environment: IDEMPOTENCY_TABLE = aws_dynamodb_table.idempotency.name
output "idempotency_table_name" {
  value = aws_dynamodb_table.idempotency.name
}
