"""The project's app: reliable is installed in ready(), after django_dramatiq built the broker."""

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "shop"

    def ready(self) -> None:
        import dramatiq
        from django.conf import settings

        import reliable

        reliable.install(dramatiq.get_broker(), store=settings.RELIABLE_STORE)
