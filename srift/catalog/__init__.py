"""The EC2 GPU instance catalog: bundled CSVs (configs/aws/) and a boto3 refresh into a user cache."""
