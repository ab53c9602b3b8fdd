"""A minimal Django project using django-dramatiq, with reliable installed the documented way."""

import os

SECRET_KEY = "test-only"
USE_TZ = True
INSTALLED_APPS = ["django_dramatiq", "shop"]  # django_dramatiq first: it builds the broker
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["DJANGO_DB"]}}
DRAMATIQ_BROKER = {
    "BROKER": "dramatiq.brokers.stub.StubBroker",
    "OPTIONS": {},
    "MIDDLEWARE": [
        "dramatiq.middleware.AgeLimit",
        "dramatiq.middleware.TimeLimit",
        "dramatiq.middleware.Callbacks",
        "dramatiq.middleware.Retries",
        "django_dramatiq.middleware.AdminMiddleware",
        "django_dramatiq.middleware.DbConnectionsMiddleware",
    ],
}
RELIABLE_STORE = os.environ["RELIABLE_STORE"]
