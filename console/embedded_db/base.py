"""Django's PostgreSQL backend for the embedded server, which it starts on first use.

Settings name this engine when DATABASE_URL is unset (console.database). Nothing happens
until a connection is opened (or `dbshell` runs): then the server in var/pgdata is started
if it is not running, and HOST and PORT are filled in with its socket, so code that reads the
connection's settings (tests handing the database to child processes) sees where it is.
"""

from django.db.backends.postgresql import base, client

from console.database import embedded_server_address


class DatabaseClient(client.DatabaseClient):
    def runshell(self, parameters):
        self.connection.locate_embedded_server()
        super().runshell(parameters)


class DatabaseWrapper(base.DatabaseWrapper):
    client_class = DatabaseClient

    def locate_embedded_server(self) -> None:
        if not self.settings_dict["HOST"]:
            self.settings_dict.update(embedded_server_address())

    def get_connection_params(self):
        self.locate_embedded_server()
        return super().get_connection_params()
