"""Creates a blob container on a loopback Azurite (the published dev account).

usage: azure_container.py BLOB_URL CONTAINER
"""
import sys

from azure.storage.blob import BlobServiceClient

KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
url, name = sys.argv[1], sys.argv[2]
conn = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
    f"AccountKey={KEY};BlobEndpoint={url}/devstoreaccount1;"
)
BlobServiceClient.from_connection_string(conn).create_container(name)
print("created", name)
